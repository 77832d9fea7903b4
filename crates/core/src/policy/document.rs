//! A whole policy file: global `defaults`, per-service overrides,
//! `gatewayRetries`, the `callGraph` of who calls whom, the `forecast`
//! scenario and the `reporters` allow-list; decoded, validated and resolved
//! per service.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::forecast::ForecastBlock;
use super::layer::Layered;
use super::model::{RetryPolicy, RetryPolicySpec};
use super::name::check_service_name;
use super::reporters::Reporters;
use super::tree::{entries, unknown_key, Errors, KeyPath, Node, PolicyError};
use super::validate;

/// The keys of a policy file's top level.
pub const DOCUMENT_KEYS: &[&str] = &[
    "defaults",
    "services",
    "gatewayRetries",
    "callGraph",
    "forecast",
    "reporters",
];

/// A policy file's content. Loading builds one only from a file that
/// decoded and validated, so every service resolves to a valid policy; the
/// fields are public, and whoever changes them keeps that true (`diff`
/// swaps in another file's forecast, call graph and reporters, which no
/// service's policy depends on).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDocument {
    /// The file's `defaults` layer.
    pub defaults: RetryPolicySpec,
    /// Each service's override layer, by service name.
    pub services: BTreeMap<String, RetryPolicySpec>,
    /// Whether an API gateway in front of the services should retry too
    /// (off when the services retry, or attempts multiply).
    pub gateway_retries: bool,
    /// Who calls whom: each caller's callees, by service name. Optional; the
    /// storm-risk lint multiplies retries along its chains.
    pub call_graph: BTreeMap<String, Vec<String>>,
    /// The herd each service's policy is forecast against (`check`).
    pub forecast: ForecastBlock,
    /// Which service accounts may report about, and be paced for, each
    /// dependency (when the daemon checks tokens).
    pub reporters: Reporters,
}

/// Where a resolved policy's keys came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicySource {
    /// The service has its own entry under `services` (possibly empty).
    Override,
    /// The service is not in the file: it gets the defaults.
    Defaults,
}

/// One service's policy: defaults merged with its override.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedPolicy {
    /// Whether the service has an entry of its own.
    pub source: PolicySource,
    /// The dotted keys that the service's override set, sorted.
    pub overridden: Vec<String>,
    /// The policy to apply.
    pub policy: RetryPolicy,
}

impl PolicyDocument {
    /// Decodes and validates a document, returning every error found.
    pub fn from_node(root: &Node) -> Result<Self, Errors> {
        let mut errors = Errors::new();
        if matches!(root, Node::Null) {
            errors.push(PolicyError::value(
                &KeyPath::root(),
                "the policy file is empty; it needs at least a `defaults:` block (an empty file is often a truncated write)",
            ));
            return Err(errors);
        }
        let document = decode(root, &mut errors);
        errors.extend(document.check());
        if errors.is_empty() {
            Ok(document)
        } else {
            errors.sort();
            errors.dedup();
            Err(errors)
        }
    }

    /// The built-in policy overlaid with the file's defaults.
    pub fn defaults_policy(&self) -> RetryPolicy {
        let mut policy = RetryPolicy::default();
        policy.apply(&self.defaults);
        policy
    }

    /// The policy for `service`; a service not in the file gets the defaults.
    pub fn resolve(&self, service: &str) -> ResolvedPolicy {
        let mut policy = self.defaults_policy();
        let Some(layer) = self.services.get(service) else {
            return ResolvedPolicy {
                source: PolicySource::Defaults,
                overridden: Vec::new(),
                policy,
            };
        };
        policy.apply(layer);
        ResolvedPolicy {
            source: PolicySource::Override,
            overridden: set_keys(layer),
            policy,
        }
    }

    /// Range errors, each reported in the layer that set the offending key.
    fn check(&self) -> Errors {
        let defaults_path = KeyPath::root().key("defaults");
        let mut errors = attribute(&self.defaults_policy(), &self.defaults, &defaults_path, true);
        for (name, layer) in &self.services {
            let path = KeyPath::root().key("services").key(name.as_str());
            errors.extend(attribute(&self.resolve(name).policy, layer, &path, false));
        }
        errors
    }
}

fn set_keys(layer: &RetryPolicySpec) -> Vec<String> {
    let mut keys = Vec::new();
    RetryPolicy::set_keys(layer, "", &mut keys);
    keys.sort();
    keys
}

/// Reports `policy`'s violations at the first involved key `layer` sets.
/// Violations of keys the layer does not set belong to a lower layer and are
/// skipped, unless this is the lowest layer in the file (`always`).
fn attribute(policy: &RetryPolicy, layer: &RetryPolicySpec, path: &KeyPath, always: bool) -> Errors {
    let set = set_keys(layer);
    validate::check(policy)
        .into_iter()
        .filter_map(|violation| {
            let key = violation
                .keys
                .iter()
                .find(|key| set.iter().any(|s| s == *key))
                .or(always.then_some(&violation.keys[0]))?;
            Some(PolicyError::value(&path.dotted(key), violation.message))
        })
        .collect()
}

fn decode(root: &Node, errors: &mut Errors) -> PolicyDocument {
    let mut document = PolicyDocument {
        defaults: RetryPolicySpec::default(),
        services: BTreeMap::new(),
        gateway_retries: false,
        call_graph: BTreeMap::new(),
        forecast: ForecastBlock::default(),
        reporters: Reporters::default(),
    };
    let root_path = KeyPath::root();
    for (key, value) in entries(root, &root_path, errors) {
        let path = root_path.key(key);
        match key {
            "defaults" => document.defaults = RetryPolicy::decode(value, &path, errors),
            "services" => document.services = decode_services(value, &path, errors),
            "gatewayRetries" => {
                if let Some(flag) = bool::decode(value, &path, errors) {
                    document.gateway_retries = flag;
                }
            }
            "callGraph" => document.call_graph = decode_call_graph(value, &path, errors),
            "forecast" => document.forecast = ForecastBlock::decode(value, &path, errors),
            "reporters" => document.reporters = Reporters::decode(value, &path, errors),
            other => errors.push(unknown_key(&path, other, DOCUMENT_KEYS)),
        }
    }
    document
}

fn decode_services(node: &Node, path: &KeyPath, errors: &mut Errors) -> BTreeMap<String, RetryPolicySpec> {
    let mut services = BTreeMap::new();
    for (name, value) in entries(node, path, errors) {
        let at = path.key(name);
        if let Err(problem) = check_service_name(name) {
            errors.push(PolicyError::key(&at, problem));
        }
        services.insert(name.to_owned(), RetryPolicy::decode(value, &at, errors));
    }
    services
}

/// The most calls (caller → callee pairs) a `callGraph` may list.
pub const MAX_CALLS: usize = 10_000;

/// `callGraph: {caller: [callee, ...]}`, every name a service name, at most
/// [`MAX_CALLS`] calls.
fn decode_call_graph(node: &Node, path: &KeyPath, errors: &mut Errors) -> BTreeMap<String, Vec<String>> {
    let mut graph = BTreeMap::new();
    for (caller, value) in entries(node, path, errors) {
        let at = path.key(caller);
        if let Err(problem) = check_service_name(caller) {
            errors.push(PolicyError::key(&at, problem));
        }
        let callees = match value {
            Node::Null => Vec::new(),
            Node::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| callee(item, &at.index(i), errors))
                .collect(),
            other => {
                errors.push(PolicyError::value(
                    &at,
                    format!(
                        "expected a list of the services {caller} calls, found {}",
                        other.kind()
                    ),
                ));
                Vec::new()
            }
        };
        graph.insert(caller.to_owned(), callees);
    }
    let calls: usize = graph.values().map(Vec::len).sum();
    if calls > MAX_CALLS {
        errors.push(PolicyError::value(
            path,
            format!("lists {calls} calls; at most {MAX_CALLS} are allowed (list the calls whose retries multiply)"),
        ));
    }
    graph
}

fn callee(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<String> {
    let Node::Str(name) = node else {
        errors.push(PolicyError::value(
            path,
            format!("expected a service name, found {}", node.kind()),
        ));
        return None;
    };
    match check_service_name(name) {
        Ok(()) => Some(name.clone()),
        Err(problem) => {
            errors.push(PolicyError::value(path, problem));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::model::Jitter;
    use std::time::Duration;

    use crate::policy::tree::build::{map, s};

    /// The shipped retry-policy ConfigMap, as a tree.
    fn seed_document() -> Node {
        map(vec![
            (
                "defaults",
                map(vec![
                    ("maxRetries", Node::Int(3)),
                    ("initialDelay", s("100ms")),
                    ("maxDelay", s("10s")),
                    ("multiplier", Node::Float(2.0)),
                    ("jitterFactor", Node::Float(0.5)),
                ]),
            ),
            (
                "services",
                map(vec![
                    (
                        "payment-service",
                        map(vec![("maxRetries", Node::Int(2)), ("initialDelay", s("200ms"))]),
                    ),
                    (
                        "inventory-service",
                        map(vec![("maxRetries", Node::Int(5)), ("maxDelay", s("30s"))]),
                    ),
                    ("notification-service", map(vec![("maxRetries", Node::Int(1))])),
                ]),
            ),
            ("gatewayRetries", Node::Bool(false)),
        ])
    }

    fn errors_of(node: &Node) -> Vec<String> {
        PolicyDocument::from_node(node)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_call_graph_is_bounded() {
        let callees = (0..=MAX_CALLS).map(|i| s(&format!("s{i}"))).collect();
        let root = map(vec![
            ("defaults", map(vec![])),
            ("callGraph", map(vec![("gateway", Node::Seq(callees))])),
        ]);
        let errors = errors_of(&root);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("lists 10001 calls; at most 10000")),
            "{errors:?}"
        );
    }

    #[test]
    fn a_call_graph_lists_each_callers_callees() {
        let node = map(vec![
            ("defaults", map(vec![])),
            (
                "callGraph",
                map(vec![
                    ("gateway", Node::Seq(vec![s("orders")])),
                    ("orders", Node::Seq(vec![s("payment-service"), s("inventory")])),
                    ("inventory", Node::Null),
                ]),
            ),
        ]);
        let doc = PolicyDocument::from_node(&node).unwrap();
        assert_eq!(doc.call_graph["orders"], ["payment-service", "inventory"]);
        assert!(doc.call_graph["inventory"].is_empty());
    }

    #[test]
    fn a_bad_call_graph_names_each_problem() {
        let node = map(vec![
            ("defaults", map(vec![])),
            (
                "callGraph",
                map(vec![
                    ("Gateway", Node::Seq(vec![s("orders")])),
                    ("orders", s("payment")),
                    ("payment", Node::Seq(vec![Node::Int(3), s("db_1")])),
                ]),
            ),
        ]);
        let errors = errors_of(&node);
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(errors
            .iter()
            .any(|e| e.starts_with("callGraph.Gateway") && e.contains("DNS-1123")));
        assert!(errors
            .iter()
            .any(|e| e.starts_with("callGraph.orders") && e.contains("a list of the services")));
        assert!(errors
            .iter()
            .any(|e| e.starts_with("callGraph.payment[0]") && e.contains("service name")));
        assert!(errors
            .iter()
            .any(|e| e.starts_with("callGraph.payment[1]") && e.contains("db_1")));
    }

    #[test]
    fn seed_configmap_resolves_key_by_key() {
        let doc = PolicyDocument::from_node(&seed_document()).unwrap();
        let payment = doc.resolve("payment-service");
        assert_eq!(payment.source, PolicySource::Override);
        assert_eq!(payment.overridden, ["initialDelay", "maxRetries"]);
        assert_eq!(payment.policy.max_retries, 2);
        assert_eq!(payment.policy.initial_delay, Duration::from_millis(200));
        assert_eq!(payment.policy.max_delay, Duration::from_secs(10), "inherited");
        assert_eq!(payment.policy.jitter, Jitter::Proportional);
        assert_eq!(
            doc.resolve("inventory-service").policy.max_delay,
            Duration::from_secs(30)
        );
        let unknown = doc.resolve("search-service");
        assert_eq!(unknown.source, PolicySource::Defaults);
        assert!(unknown.overridden.is_empty());
        assert_eq!(unknown.policy.max_retries, 3);
        assert!(!doc.gateway_retries);
    }

    #[test]
    fn nested_blocks_merge_key_by_key() {
        let node = map(vec![
            (
                "defaults",
                map(vec![(
                    "circuitBreaker",
                    map(vec![("enabled", Node::Bool(true)), ("openTimeout", s("10s"))]),
                )]),
            ),
            (
                "services",
                map(vec![(
                    "a",
                    map(vec![(
                        "circuitBreaker",
                        map(vec![("halfOpenMaxCalls", Node::Int(2))]),
                    )]),
                )]),
            ),
        ]);
        let resolved = PolicyDocument::from_node(&node).unwrap().resolve("a");
        let breaker = resolved.policy.circuit_breaker;
        assert!(breaker.enabled);
        assert_eq!(breaker.open_timeout, Duration::from_secs(10));
        assert_eq!(breaker.half_open_max_calls, 2);
        assert_eq!(breaker.success_threshold, 3, "built-in");
        assert_eq!(resolved.overridden, ["circuitBreaker.halfOpenMaxCalls"]);
    }

    #[test]
    fn empty_and_null_override_blocks_are_fine() {
        let node = map(vec![(
            "services",
            map(vec![("a", Node::Null), ("b", map(vec![]))]),
        )]);
        let doc = PolicyDocument::from_node(&node).unwrap();
        assert_eq!(doc.resolve("a").source, PolicySource::Override);
        assert_eq!(doc.resolve("b").policy, RetryPolicy::default());
        let nulls = map(vec![("defaults", Node::Null), ("services", Node::Null)]);
        assert!(PolicyDocument::from_node(&nulls).is_ok());
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let node = map(vec![
            (
                "defaults",
                map(vec![
                    ("maxDelays", s("5s")),
                    ("initialDelay", Node::Int(100)),
                    ("multiplier", Node::Float(0.5)),
                    ("jitter", s("fulll")),
                ]),
            ),
            (
                "services",
                map(vec![("Payment_Service", map(vec![("maxRetries", s("two"))]))]),
            ),
            ("gatewayRetry", Node::Bool(true)),
        ]);
        assert_eq!(
            errors_of(&node),
            [
                "defaults.initialDelay: a bare number is not a duration; write 100 with a unit, e.g. 100ms or 2s",
                "defaults.jitter: unknown jitter \"fulll\"; did you mean \"full\"?",
                "defaults.maxDelays: unknown key \"maxDelays\"; did you mean \"maxDelay\"?",
                "defaults.multiplier: must be between 1 and 100, found 0.5",
                "gatewayRetry: unknown key \"gatewayRetry\"; did you mean \"gatewayRetries\"?",
                "services.Payment_Service: service name \"Payment_Service\" may contain only lowercase letters, digits and '-' (service names are DNS-1123 labels, like Kubernetes Service names)",
                "services.Payment_Service.maxRetries: expected a whole number, found string \"two\"",
            ]
        );
    }

    #[test]
    fn an_unknown_class_or_wait_bound_is_refused_naming_its_key() {
        let gate = map(vec![
            ("criticality", s("urgent")),
            ("maxWait", map(vec![("critical", s("48h")), ("batch", s("1s"))])),
        ]);
        let node = map(vec![("defaults", map(vec![("gate", gate)]))]);
        assert_eq!(
            errors_of(&node),
            [
                "defaults.gate.criticality: unknown class \"urgent\"; expected one of: critical, default, sheddable",
                "defaults.gate.maxWait.batch: unknown key \"batch\"; expected one of: critical, default, sheddable",
                "defaults.gate.maxWait.critical: must be between 0s and 24h0m0s, found 48h0m0s",
            ]
        );
    }

    #[test]
    fn cross_field_errors_land_in_the_layer_that_set_them() {
        let node = map(vec![
            ("defaults", map(vec![("multiplier", Node::Float(0.5))])),
            (
                "services",
                map(vec![
                    ("fast", map(vec![("maxDelay", s("50ms"))])),
                    ("fine", map(vec![("maxRetries", Node::Int(1))])),
                ]),
            ),
        ]);
        assert_eq!(
            errors_of(&node),
            [
                "defaults.multiplier: must be between 1 and 100, found 0.5",
                "services.fast.maxDelay: initialDelay (100ms) is greater than maxDelay (50ms); maxDelay caps every delay",
            ],
            "the bad default is reported once, not again under each service"
        );
    }

    #[test]
    fn empty_document_and_wrong_shapes_are_errors() {
        assert!(errors_of(&Node::Null)[0].contains("the policy file is empty"));
        assert_eq!(
            errors_of(&Node::Seq(vec![])),
            ["(document): expected a mapping of keys, found a list"]
        );
        let node = map(vec![("services", Node::Seq(vec![s("a")]))]);
        assert_eq!(
            errors_of(&node),
            ["services: expected a mapping of keys, found a list"]
        );
    }

    #[test]
    fn resolved_policy_round_trips_through_json() {
        let doc = PolicyDocument::from_node(&seed_document()).unwrap();
        let resolved = doc.resolve("payment-service");
        let json = serde_json::to_value(&resolved).unwrap();
        assert_eq!(json["policy"]["initialDelayMs"], 200);
        assert_eq!(
            json["policy"]["retryOn"],
            serde_json::json!(["connect-failure", "timeout", "reset", "5xx", 429])
        );
        assert_eq!(json["source"], "override");
        let back: ResolvedPolicy = serde_json::from_value(json).unwrap();
        assert_eq!(back, resolved);
    }

    #[test]
    fn a_resolved_policy_is_written_key_by_key_as_a_file_writes_it() {
        use crate::policy::Layered;
        let mut written = Vec::new();
        RetryPolicy::default().written("", &mut written);
        let value = |key: &str| {
            written
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{key} is not written"))
        };
        assert_eq!(value("initialDelay"), "100ms");
        assert_eq!(value("maxElapsed"), "0s");
        assert_eq!(value("delays"), "[]");
        assert_eq!(value("retryOn"), "[connect-failure, timeout, reset, 5xx, 429]");
        assert_eq!(value("budget.scope"), "process");
        assert_eq!(value("circuitBreaker.slidingWindow"), "100");
        assert_eq!(value("jitterFactor"), "0.5");
        let mut keys = Vec::new();
        RetryPolicy::all_keys("", &mut keys);
        let names: Vec<&String> = written.iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            keys.iter().collect::<Vec<_>>(),
            "every key, once, in file order"
        );
    }
}
