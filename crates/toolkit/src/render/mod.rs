//! `stormguard render` and `GET /v1/render/{format}/{service}`: a service's
//! resolved policy in the retry dialect of gRPC, Envoy, Istio or Linkerd, so
//! that a mesh or a gRPC client takes its retries from the same file as the
//! services that use the library. What a dialect cannot express is listed as
//! lost, naming the key: nothing is dropped in silence.

mod envoy;
mod grpc;
mod istio;
mod linkerd;

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use stormguard_core::policy::{Jitter, RetryCondition, RetryPolicy};

/// A retry dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A gRPC service config (gRFC A6): `methodConfig` and `retryThrottling`.
    Grpc,
    /// Envoy v3: a route action's retry fields and a cluster's budget and outlier detection.
    Envoy,
    /// Istio: a VirtualService's retries and a DestinationRule's outlier detection.
    Istio,
    /// Linkerd: the Service's retry, timeout and failure-accrual annotations, and a ServiceProfile's budget.
    Linkerd,
}

impl Format {
    /// Every dialect.
    pub const ALL: [Format; 4] = [Format::Grpc, Format::Envoy, Format::Istio, Format::Linkerd];

    /// The name in a URL and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Grpc => "grpc",
            Format::Envoy => "envoy",
            Format::Istio => "istio",
            Format::Linkerd => "linkerd",
        }
    }

    /// The dialect named `text`, if any.
    pub fn named(text: &str) -> Option<Format> {
        Self::ALL.into_iter().find(|f| f.name() == text)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A setting the dialect cannot carry, or carries only in part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    /// The policy key, as a policy file writes it.
    pub key: &'static str,
    /// What becomes of it, and why.
    pub why: String,
}

/// A service's policy in one dialect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rendering {
    /// The dialect.
    pub format: Format,
    /// The service.
    pub service: String,
    /// The configuration, as JSON (a gRPC service config, or Kubernetes objects).
    pub document: Value,
    /// What the dialect could not carry.
    pub lost: Vec<Lost>,
}

/// Where the rendering goes: the service, and for the Kubernetes dialects
/// its namespace.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The service, as its Kubernetes Service is named.
    pub service: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
}

/// `policy`, the resolved policy of `target.service`, in `format`.
pub fn render(target: Target<'_>, policy: &RetryPolicy, format: Format) -> Rendering {
    let mut lost = Losses::default();
    if policy.gate.enabled {
        lost.lose(
            "gate",
            "the send gate paces callers through the stormguard library and daemon; no mesh or gRPC setting does. Its classes (criticality, maxWait) have no equivalent either: Envoy's route priority (HIGH) gives a route its own connection limits, not a first claim on what a recovering service can take, and a mesh has no wait bound on a client's line",
        );
    }
    let document = match format {
        Format::Grpc => grpc::render(policy, &mut lost),
        Format::Envoy => envoy::render(policy, &mut lost),
        Format::Istio => istio::render(target, policy, &mut lost),
        Format::Linkerd => linkerd::render(target, policy, &mut lost),
    };
    Rendering {
        format,
        service: target.service.to_owned(),
        document,
        lost: lost.0,
    }
}

/// The document as its users write it: a gRPC service config as JSON,
/// Kubernetes objects and Envoy fragments as YAML (one document per object).
pub fn text(rendering: &Rendering) -> String {
    match (&rendering.format, &rendering.document) {
        (Format::Grpc, document) => serde_json::to_string_pretty(document).expect("plain data") + "\n",
        (_, Value::Array(objects)) => objects
            .iter()
            .map(crate::policy::yaml::to_text)
            .collect::<Vec<_>>()
            .join("---\n"),
        (_, document) => crate::policy::yaml::to_text(document),
    }
}

/// What a rendering loses, in the order found.
#[derive(Debug, Default)]
pub(crate) struct Losses(Vec<Lost>);

impl Losses {
    pub(crate) fn lose(&mut self, key: &'static str, why: impl Into<String>) {
        self.0.push(Lost { key, why: why.into() });
    }

    /// The backoff, for a dialect whose delays are `base × 2^n`, each drawn
    /// uniformly below (full jitter), as gRPC's and Envoy's are; `fixed_two`
    /// when the multiplier cannot be set.
    pub(crate) fn full_jitter_backoff(&mut self, policy: &RetryPolicy, dialect: &str, fixed_two: bool) {
        if !policy.delays.is_empty() {
            self.lose("delays", format!("{dialect} has no explicit schedule: initialDelay, maxDelay and multiplier stand in for it"));
        }
        if !matches!(policy.jitter, Jitter::Full) {
            self.lose(
                "jitter",
                format!(
                    "{dialect} draws each delay uniformly below the backoff (full jitter), not {}",
                    policy.jitter
                ),
            );
        }
        if fixed_two && policy.multiplier != 2.0 {
            self.lose(
                "multiplier",
                format!(
                    "{dialect} doubles the backoff each time; {} is lost",
                    policy.multiplier
                ),
            );
        }
    }
}

/// A duration as protobuf's JSON writes one: seconds, up to nine decimals, `s`.
pub(crate) fn proto_duration(d: Duration) -> String {
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        return format!("{}s", d.as_secs());
    }
    let fraction = format!("{nanos:09}");
    format!("{}.{}s", d.as_secs(), fraction.trim_end_matches('0'))
}

/// The named retry conditions and HTTP status codes of `policy.retryOn`.
pub(crate) fn conditions(policy: &RetryPolicy) -> (Vec<RetryCondition>, Vec<u16>) {
    let mut named = Vec::new();
    let mut codes = Vec::new();
    for condition in &policy.retry_on.0 {
        match condition {
            RetryCondition::Status(code) => codes.push(*code),
            other => named.push(*other),
        }
    }
    (named, codes)
}

#[cfg(test)]
mod tests;
