use super::*;
use crate::policy::{load_bytes, LoadLimits};

fn lint_yaml(yaml: &str) -> Lint {
    let document = load_bytes("test.yaml", yaml.as_bytes(), LoadLimits::default()).expect("a valid policy");
    lint(&document)
}

fn rules(lint: &Lint) -> Vec<(&str, &str)> {
    lint.warnings
        .iter()
        .map(|w| (w.service.as_str(), w.rule.code()))
        .collect()
}

#[test]
fn the_bundled_seed_policy_is_clean() {
    let yaml = std::fs::read_to_string("policies/retry-policy.yaml").unwrap();
    let lint = lint_yaml(&yaml);
    assert_eq!(rules(&lint), Vec::<(&str, &str)>::new());
}

#[test]
fn no_jitter_is_reported_where_it_is_set() {
    let lint = lint_yaml(
        "defaults: {jitter: none}\n\
         services:\n  inherits: {maxRetries: 2}\n  own: {jitter: proportional, jitterFactor: 0}\n  fixed: {jitter: full}\n",
    );
    assert_eq!(rules(&lint), [("(defaults)", "no-jitter"), ("own", "no-jitter")]);
    let message = &lint.warnings[0].message;
    assert!(
        message.contains("synchronised") && message.contains("jitter: full"),
        "{message}"
    );
}

#[test]
fn a_long_max_delay_is_a_zombie_pod() {
    let lint = lint_yaml("defaults: {maxDelay: 30m}\n");
    assert_eq!(rules(&lint), [("(defaults)", "long-max-delay")]);
    assert!(
        lint.warnings[0].message.contains("30m"),
        "{}",
        lint.warnings[0].message
    );
    assert!(lint.warnings[0].message.contains("zombie"));
    let fine = lint_yaml("defaults: {maxDelay: 1m, jitterFactor: 0.5}\n");
    assert!(fine.warnings.is_empty(), "1m × 1.5 stays under 2m");
}

#[test]
fn tiny_constant_delays_are_a_flood() {
    let lint = lint_yaml("services:\n  hot: {initialDelay: 5ms, maxDelay: 5ms, multiplier: 1}\n");
    assert_eq!(rules(&lint), [("hot", "tiny-constant-delay")]);
    assert!(lint.warnings[0].message.contains("5ms"));
    let listed = lint_yaml("services:\n  hot: {delays: [1ms, 2ms, 2ms]}\n");
    assert_eq!(rules(&listed), [("hot", "tiny-constant-delay")]);
    let growing = lint_yaml("services:\n  ok: {initialDelay: 5ms, multiplier: 2}\n");
    assert!(growing.warnings.is_empty());
}

#[test]
fn retries_without_a_budget() {
    let lint = lint_yaml("services:\n  orders: {maxRetries: 4, budget: {enabled: false}}\n");
    assert_eq!(rules(&lint), [("orders", "no-budget")]);
    assert!(lint.warnings[0].message.contains("5 times"));
    let throttled =
        lint_yaml("services:\n  orders: {budget: {enabled: false}, retryThrottling: {enabled: true}}\n");
    assert!(throttled.warnings.is_empty(), "gRPC throttling caps retries too");
}

#[test]
fn no_retries_no_risk() {
    let lint = lint_yaml("defaults: {maxRetries: 0, jitter: none, budget: {enabled: false}}\n");
    assert!(lint.warnings.is_empty());
}

const CHAIN: &str = "defaults: {maxRetries: 2}\n\
    callGraph:\n  api: [orders]\n  orders: [payment-service]\n";

#[test]
fn retries_at_every_layer_of_a_chain_multiply() {
    let lint = lint_yaml(&format!("{CHAIN}gatewayRetries: true\n"));
    let amplified: Vec<&Warning> = lint
        .warnings
        .iter()
        .filter(|w| w.rule == Rule::RetryAmplification)
        .collect();
    let worst = amplified
        .iter()
        .find(|w| w.service == "payment-service")
        .expect("the chain's end");
    assert!(worst.message.contains("27 attempts"), "{}", worst.message);
    assert!(worst
        .message
        .contains("gateway → api ×3, api → orders ×3, orders → payment-service ×3"));
    assert!(amplified
        .iter()
        .any(|w| w.service == "orders" && w.message.contains("9 attempts")));
}

#[test]
fn one_retrying_layer_is_fine() {
    let without_gateway = lint_yaml(&format!("{CHAIN}services:\n  orders: {{maxRetries: 0}}\n"));
    assert!(
        without_gateway.warnings.is_empty(),
        "{:?}",
        without_gateway.warnings
    );
    let two_layers = lint_yaml(CHAIN);
    assert_eq!(
        rules(&two_layers),
        [("payment-service", "retry-amplification")],
        "orders and payment retry"
    );
}

#[test]
fn a_call_cycle_is_named() {
    let lint = lint_yaml("callGraph:\n  a: [b]\n  b: [c]\n  c: [a]\n  d: [a]\n");
    let cycle = lint
        .warnings
        .iter()
        .find(|w| w.rule == Rule::CallCycle)
        .expect("a cycle warning");
    assert!(cycle.message.contains("a, b, c"), "{}", cycle.message);
}

#[test]
fn each_service_gets_a_forecast_of_the_seed_scenario() {
    let yaml = std::fs::read_to_string("policies/retry-policy.yaml").unwrap();
    let lint = lint_yaml(&yaml);
    let services: Vec<&str> = lint.forecasts.iter().map(|f| f.service.as_str()).collect();
    assert_eq!(
        services,
        [
            "(defaults)",
            "inventory-service",
            "notification-service",
            "payment-service"
        ]
    );
    let payment = &lint.forecasts[3];
    assert_eq!(
        (payment.succeeded, payment.gave_up),
        (0, 1000),
        "2 retries cannot outlast a 10 s outage"
    );
    assert_eq!(payment.wasted, 3000);
    let inventory = &lint.forecasts[1];
    assert!(
        inventory.drain_seconds > payment.drain_seconds,
        "5 retries up to 30 s wait longer"
    );
}

#[test]
fn a_service_with_a_send_gate_is_forecast_paced_through_the_daemon() {
    let yaml = "defaults:\n  maxRetries: 5\n  maxElapsed: 60s\nservices:\n  plain: {}\n  paced:\n    gate:\n      enabled: true\n";
    let lint = lint_yaml(yaml);
    let forecast = |name: &str| lint.forecasts.iter().find(|f| f.service == name).unwrap();
    let (plain, paced) = (forecast("plain"), forecast("paced"));
    assert_eq!(plain.paced_processes, None);
    assert_eq!(paced.paced_processes, Some(PACED_PROCESSES));
    assert_eq!(
        (plain.succeeded, plain.gave_up),
        (0, 1000),
        "5 retries are spent in the outage"
    );
    assert!(
        paced.succeeded >= 990,
        "paced calls wait for turns within their 60 s: {paced:?}"
    );
    assert!(
        paced.wasted * 5 < plain.wasted,
        "{} vs {}",
        paced.wasted,
        plain.wasted
    );
}
