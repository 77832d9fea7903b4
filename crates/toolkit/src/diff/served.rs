//! A running daemon's policies (`GET /v1/policies`) as the policy file that
//! would serve them, so that `stormguard diff` compares a file against what
//! is live.
//!
//! The daemon serves the resolved defaults and, for each service it lists,
//! the resolved policy and the keys its entry set. The file rebuilt from them
//! sets every key under `defaults` and, under each service, exactly those
//! keys: it resolves to what the daemon serves, service by service. What the
//! daemon does not serve (the `forecast` block, the `callGraph`, the
//! `reporters`) is taken from the file it is compared with, so that both
//! sides are forecast on the same fleet and linted along the same calls.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};
use stormguard_core::policy::{Layered, PolicyDocument, ResolvedPolicy, RetryPolicy};

use crate::policy::{load_bytes, yaml, Diagnostic, LoadLimits};

/// The parts of `GET /v1/policies` that make up the policies.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Served {
    #[serde(default)]
    gateway_retries: bool,
    defaults: RetryPolicy,
    services: BTreeMap<String, ResolvedPolicy>,
}

/// Why a daemon's answer cannot be read as policies.
#[derive(Debug)]
pub enum ServedError {
    /// The body is not the JSON of `GET /v1/policies`.
    Unreadable(serde_json::Error),
    /// The policies it describes do not make a valid file (a daemon of
    /// another version, or a key it set that this one does not know).
    Invalid(Vec<Diagnostic>),
}

impl fmt::Display for ServedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServedError::Unreadable(error) => write!(f, "not the policies a daemon serves: {error}"),
            ServedError::Invalid(diagnostics) => {
                write!(f, "the policies it serves do not make a valid file:")?;
                for d in diagnostics {
                    let at = d.path.as_deref().map(|p| format!(" at {p}")).unwrap_or_default();
                    write!(f, "\n  {}{at}", d.message)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ServedError {}

/// The policy file that serves what `answer` (the body of a daemon's
/// `GET /v1/policies`, from `origin`) says, with `compared`'s forecast,
/// call graph and reporters.
pub fn served_document(
    origin: &str,
    answer: &[u8],
    compared: Option<&PolicyDocument>,
) -> Result<PolicyDocument, ServedError> {
    let served: Served = serde_json::from_slice(answer).map_err(ServedError::Unreadable)?;
    let yaml = yaml::to_text(&file_of(&served));
    let limits = LoadLimits {
        max_bytes: usize::MAX,
        ..LoadLimits::default()
    };
    let mut document = load_bytes(origin, yaml.as_bytes(), limits).map_err(ServedError::Invalid)?;
    if let Some(compared) = compared {
        document.forecast = compared.forecast.clone();
        document.call_graph = compared.call_graph.clone();
        document.reporters = compared.reporters.clone();
    }
    Ok(document)
}

/// The file's top level: every default key, each service's own keys.
fn file_of(served: &Served) -> Map<String, Value> {
    let mut services = Map::new();
    for (name, resolved) in &served.services {
        let own = |key: &str| resolved.overridden.iter().any(|k| k == key);
        services.insert(name.clone(), keys_of(&resolved.policy, own).into());
    }
    let mut file = Map::new();
    file.insert("defaults".into(), keys_of(&served.defaults, |_| true).into());
    file.insert("services".into(), services.into());
    file.insert("gatewayRetries".into(), served.gateway_retries.into());
    file
}

/// `policy`'s keys that `wanted` picks, nested as a file nests them.
fn keys_of(policy: &RetryPolicy, wanted: impl Fn(&str) -> bool) -> Map<String, Value> {
    let mut written = Vec::new();
    policy.written("", &mut written);
    let mut out = Map::new();
    for (key, value) in written.into_iter().filter(|(key, _)| wanted(key)) {
        // A value as a file writes it is YAML: `200ms`, `[5xx, 429]`.
        insert(&mut out, &key, yaml::value_of(value));
    }
    out
}

/// Sets the dotted `key` in `map`, making the blocks on its way.
fn insert(map: &mut Map<String, Value>, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            map.insert(key.into(), value);
        }
        Some((block, rest)) => {
            let entry = map.entry(block).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::changes;

    /// What a daemon serving `document` answers to `GET /v1/policies`.
    fn served_body(document: &PolicyDocument) -> Vec<u8> {
        let services: BTreeMap<&String, ResolvedPolicy> = document
            .services
            .keys()
            .map(|name| (name, document.resolve(name)))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "version": "sha256:0",
            "gatewayRetries": document.gateway_retries,
            "defaults": document.defaults_policy(),
            "services": services,
        }))
        .unwrap()
    }

    fn bundled(name: &str) -> PolicyDocument {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../policies")
            .join(name);
        crate::policy::load_file(&path, LoadLimits::default()).unwrap().0
    }

    #[test]
    fn every_bundled_file_rebuilds_to_what_it_serves() {
        for name in ["retry-policy.yaml", "full-example.yaml"] {
            let file = bundled(name);
            let rebuilt = served_document("daemon", &served_body(&file), Some(&file)).unwrap();
            assert_eq!(
                changes(&file, &rebuilt),
                vec![],
                "{name}: no service's policy changes"
            );
            assert_eq!(rebuilt.gateway_retries, file.gateway_retries);
            for service in file.services.keys() {
                assert_eq!(
                    rebuilt.resolve(service),
                    file.resolve(service),
                    "{name}: {service}"
                );
            }
            assert_eq!(rebuilt.forecast, file.forecast, "the compared file's forecast");
        }
    }

    #[test]
    fn a_service_keeps_only_the_keys_its_entry_set() {
        let file = crate::policy::load_bytes(
            "test.yaml",
            b"defaults:\n  maxRetries: 4\nservices:\n  payments:\n    circuitBreaker:\n      openTimeout: 5s\n  search: {}\n",
            LoadLimits::default(),
        )
        .unwrap();
        let rebuilt = served_document("daemon", &served_body(&file), None).unwrap();
        let mut payments = Vec::new();
        RetryPolicy::set_keys(&rebuilt.services["payments"], "", &mut payments);
        assert_eq!(payments, ["circuitBreaker.openTimeout"]);
        assert_eq!(
            rebuilt.services["search"],
            Default::default(),
            "an empty entry stays one"
        );
        assert_eq!(rebuilt.defaults_policy().max_retries, 4);
    }

    #[test]
    fn an_answer_that_is_not_policies_says_so() {
        let error = served_document("http://daemon", b"<html>", None).unwrap_err();
        assert!(matches!(error, ServedError::Unreadable(_)), "{error}");
        assert!(
            error.to_string().starts_with("not the policies a daemon serves"),
            "{error}"
        );
    }

    #[test]
    fn a_policy_out_of_range_names_the_key() {
        let file = bundled("retry-policy.yaml");
        let mut body: serde_json::Value = serde_json::from_slice(&served_body(&file)).unwrap();
        body["defaults"]["jitterFactor"] = serde_json::json!(7.0);
        let error = served_document("http://daemon", body.to_string().as_bytes(), None).unwrap_err();
        assert!(matches!(error, ServedError::Invalid(_)), "{error}");
        assert!(error.to_string().contains("defaults.jitterFactor"), "{error}");
    }
}
