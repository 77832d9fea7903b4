//! Reading a running daemon's policies over HTTP, for `stormguard diff URL`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stormguard_core::policy::PolicyDocument;
use stormguard_toolkit::diff::ServedError;

/// Why a daemon's policies could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The `--ca-file` could not be read.
    #[error("--ca-file {}: {source}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The `--ca-file` holds no PEM certificates this client can use.
    #[error("--ca-file {}: {source}", path.display())]
    CaCertificates {
        /// The file.
        path: PathBuf,
        /// What the TLS library said.
        source: reqwest::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot make an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The runtime the request runs on could not be started.
    #[error("cannot start the runtime to ask the daemon: {0}")]
    Runtime(#[source] std::io::Error),
    /// The request failed: no connection, a TLS failure, a timeout.
    #[error("GET {endpoint}: {causes}")]
    Get {
        /// The URL asked.
        endpoint: String,
        /// The error and each of its causes, down to the root.
        causes: String,
    },
    /// The daemon answered, but not with its policies.
    #[error("GET {endpoint} answered {status}")]
    Status {
        /// The URL asked.
        endpoint: String,
        /// What it answered.
        status: reqwest::StatusCode,
    },
    /// The answer is not policies a daemon serves.
    #[error(transparent)]
    Served(#[from] ServedError),
}

/// What the daemon at `url` serves, as the policy file that would serve it
/// (the keys `compared`, the other side's file, sets beyond the policies);
/// an `https://` daemon's certificate checked against `ca_file` if given.
pub fn daemon_policies(
    url: &str,
    ca_file: Option<&Path>,
    compared: Option<&PolicyDocument>,
) -> Result<PolicyDocument, ReadError> {
    let client = client(ca_file)?;
    let endpoint = format!(
        "{}/v1/policies",
        url.trim_end_matches('/').trim_end_matches("/v1/policies")
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReadError::Runtime)?;
    let body = runtime.block_on(async {
        let failed = |e: reqwest::Error| ReadError::Get {
            endpoint: endpoint.clone(),
            causes: with_causes(&e),
        };
        let response = client.get(&endpoint).send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(ReadError::Status {
                endpoint: endpoint.clone(),
                status,
            });
        }
        response.bytes().await.map_err(failed)
    })?;
    Ok(stormguard_toolkit::diff::served_document(
        &endpoint, &body, compared,
    )?)
}

/// An HTTP client that trusts `ca_file`'s certificates instead of the
/// public web CAs, if given.
fn client(ca_file: Option<&Path>) -> Result<reqwest::Client, ReadError> {
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|source| ReadError::CaFile {
            path: path.to_path_buf(),
            source,
        })?;
        let certificates =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| ReadError::CaCertificates {
                path: path.to_path_buf(),
                source,
            })?;
        client = certificates
            .into_iter()
            .fold(client.tls_built_in_root_certs(false), |client, ca| {
                client.add_root_certificate(ca)
            });
    }
    client.build().map_err(ReadError::Client)
}

/// `error` and what caused it, down to the root (`connection refused`).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text = format!("{text}: {next}");
        cause = next.source();
    }
    text
}
