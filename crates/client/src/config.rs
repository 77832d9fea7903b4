//! Checking what a service configures the client with, where it enters:
//! a name the daemon would refuse is an error at construction, not a report
//! refused batch after batch.

use std::time::Duration;

use stormguard_core::policy::{check_service_name, InvalidServiceName};
use stormguard_core::wire::{check_instance, BadLength};

/// A setting of [`ClientConfig`](crate::ClientConfig) or
/// [`ReporterConfig`](crate::ReporterConfig) that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `daemon` is not an `http://` or `https://` URL.
    #[error("daemon {0:?}: not an http:// or https:// URL")]
    Daemon(String),
    /// A service name (`service`, `caller`) is not a DNS-1123 label.
    #[error("{field}: {source}")]
    ServiceName {
        /// Which setting.
        field: &'static str,
        /// The name, and what is wrong with it.
        source: InvalidServiceName,
    },
    /// `instance` is empty or longer than the daemon takes.
    #[error("instance {name:?}: {source}")]
    Instance {
        /// Its value.
        name: String,
        /// What is wrong with it.
        source: BadLength,
    },
    /// The list of services to watch is empty, too long, or (for
    /// `PolicyClient::start`) names more than one.
    #[error("services: {0}")]
    Services(String),
    /// A TLS file (CA, client certificate or key) cannot be read or used.
    #[error("{}: {problem}", file.display())]
    Tls {
        /// The file.
        file: std::path::PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A duration that must be more than zero is zero.
    #[error("{0} must be more than zero")]
    Zero(&'static str),
}

pub(crate) fn check_daemon(daemon: &str) -> Result<(), ConfigError> {
    let scheme_ok = daemon.starts_with("http://") || daemon.starts_with("https://");
    let host = daemon.split_once("://").map_or("", |(_, rest)| rest);
    if !scheme_ok || host.is_empty() {
        return Err(ConfigError::Daemon(daemon.to_string()));
    }
    Ok(())
}

pub(crate) fn check_service(field: &'static str, name: &str) -> Result<(), ConfigError> {
    check_service_name(name).map_err(|source| ConfigError::ServiceName { field, source })
}

pub(crate) fn check_instance_name(name: &str) -> Result<(), ConfigError> {
    check_instance(name).map_err(|source| ConfigError::Instance {
        name: name.to_string(),
        source,
    })
}

pub(crate) fn check_positive(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::Zero(field));
    }
    Ok(())
}
