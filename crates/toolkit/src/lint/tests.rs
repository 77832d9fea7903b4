//! Tests of the storm-risk lint: each rule on the policies that trip it and on those that do not.

use super::*;
use crate::policy::{load_bytes, LoadLimits};
use stormguard_core::fleet::floor::Claims;

fn lint_yaml(yaml: &str) -> Lint {
    let document = load_bytes("test.yaml", yaml.as_bytes(), LoadLimits::default()).expect("a valid policy");
    lint(&document, &|herd| herd)
}

fn rules(lint: &Lint) -> Vec<(&str, &str)> {
    lint.warnings
        .iter()
        .map(|w| (w.service.as_str(), w.rule.code()))
        .collect()
}

/// The message of `service`'s warning under `rule`.
fn message<'a>(lint: &'a Lint, service: &str, rule: Rule) -> &'a str {
    let found = lint
        .warnings
        .iter()
        .find(|w| w.service == service && w.rule == rule);
    &found
        .unwrap_or_else(|| panic!("no {} warning for {service}", rule.code()))
        .message
}

/// [`rules`] but `short-retry-span`, which a policy with the built-in three
/// quick retries trips in any test of the other rules.
fn other_rules(lint: &Lint) -> Vec<(&str, &str)> {
    rules(lint)
        .into_iter()
        .filter(|(_, rule)| *rule != Rule::ShortRetrySpan.code())
        .collect()
}

#[test]
fn the_shipped_policys_retries_are_all_spent_before_a_10s_outage_ends() {
    let yaml = std::fs::read_to_string("../../policies/retry-policy.yaml").unwrap();
    let lint = lint_yaml(&yaml);
    assert_eq!(
        rules(&lint),
        [
            ("(defaults)", "short-retry-span"),
            ("inventory-service", "short-retry-span"),
            ("notification-service", "short-retry-span"),
            ("payment-service", "short-retry-span"),
        ]
    );
    let defaults = &lint.warnings[0].message;
    assert!(
        defaults.contains("its 3 retries are spent within 1.05s at most, so an outage of 10s"),
        "100ms, 200ms and 400ms, each up to 50 % longer: {defaults}"
    );
    assert!(defaults.contains("stormguard tune"), "{defaults}");
    assert!(lint.warnings[2]
        .message
        .starts_with("its only retry is spent within 150ms"));
}

#[test]
fn retries_that_outlast_the_forecasts_outages_or_a_gate_that_paces_them_are_fine() {
    let long = lint_yaml(
        "defaults: {maxRetries: 10, initialDelay: 1s, maxDelay: 10s}
",
    );
    assert_eq!(other_rules(&long), rules(&long), "1+2+4+8+6×10 s outlasts 10s");
    let short_outages = lint_yaml(
        "defaults: {maxRetries: 3}
forecast: {outages: [500ms, 2s]}
",
    );
    assert_eq!(
        other_rules(&short_outages),
        rules(&short_outages),
        "1.05s outlasts 500ms"
    );
    let paced = lint_yaml(
        "defaults: {maxRetries: 3, gate: {enabled: true}}
",
    );
    assert_eq!(other_rules(&paced), rules(&paced));
    let deadline = lint_yaml(
        "defaults: {maxRetries: 10, initialDelay: 1s, maxDelay: 10s, maxElapsed: 5s}
",
    );
    assert_eq!(
        rules(&deadline),
        [("(defaults)", "short-retry-span")],
        "maxElapsed ends them at 5s"
    );
    let own_outage = lint_yaml(
        "defaults: {maxRetries: 10, initialDelay: 1s, maxDelay: 10s}
\
         services:\n  batch: {maxRetries: 2}\n  quick: {maxRetries: 2}\n\
         forecast: {services: {quick: {outages: 1s}}}\n",
    );
    assert_eq!(
        rules(&own_outage),
        [("batch", "short-retry-span")],
        "quick's own outage is 1s"
    );
}

#[test]
fn no_jitter_is_reported_where_it_is_set() {
    let lint = lint_yaml(
        "defaults: {jitter: none}\n\
         services:\n  inherits: {maxRetries: 2}\n  own: {jitter: proportional, jitterFactor: 0}\n  fixed: {jitter: full}\n",
    );
    assert_eq!(
        other_rules(&lint),
        [("(defaults)", "no-jitter"), ("own", "no-jitter")]
    );
    let message = &lint.warnings[0].message;
    assert!(
        message.contains("synchronised") && message.contains("jitter: full"),
        "{message}"
    );
}

#[test]
fn a_long_max_delay_is_a_zombie_pod() {
    let lint = lint_yaml("defaults: {maxDelay: 30m}\n");
    assert_eq!(other_rules(&lint), [("(defaults)", "long-max-delay")]);
    assert!(
        lint.warnings[0].message.contains("30m"),
        "{}",
        lint.warnings[0].message
    );
    assert!(lint.warnings[0].message.contains("zombie"));
    let fine = lint_yaml("defaults: {maxDelay: 1m, jitterFactor: 0.5}\n");
    assert!(other_rules(&fine).is_empty(), "1m × 1.5 stays under 2m");
}

#[test]
fn tiny_constant_delays_are_a_flood() {
    let lint = lint_yaml("services:\n  hot: {initialDelay: 5ms, maxDelay: 5ms, multiplier: 1}\n");
    assert_eq!(other_rules(&lint), [("hot", "tiny-constant-delay")]);
    assert!(message(&lint, "hot", Rule::TinyConstantDelay).contains("5ms"));
    let listed = lint_yaml("services:\n  hot: {delays: [1ms, 2ms, 2ms]}\n");
    assert_eq!(other_rules(&listed), [("hot", "tiny-constant-delay")]);
    let growing = lint_yaml("services:\n  ok: {initialDelay: 5ms, multiplier: 2}\n");
    assert!(other_rules(&growing).is_empty());
}

#[test]
fn retries_without_a_budget() {
    let lint = lint_yaml("services:\n  orders: {maxRetries: 4, budget: {enabled: false}}\n");
    assert_eq!(other_rules(&lint), [("orders", "no-budget")]);
    assert!(message(&lint, "orders", Rule::NoBudget).contains("5 times"));
    let throttled =
        lint_yaml("services:\n  orders: {budget: {enabled: false}, retryThrottling: {enabled: true}}\n");
    assert!(
        other_rules(&throttled).is_empty(),
        "gRPC throttling caps retries too"
    );
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
        other_rules(&without_gateway).is_empty(),
        "{:?}",
        without_gateway.warnings
    );
    let two_layers = lint_yaml(CHAIN);
    assert_eq!(
        other_rules(&two_layers),
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
fn a_reporters_entry_for_a_service_named_nowhere_else_is_flagged_as_a_likely_typo() {
    let lint = lint_yaml(
        "services:\n  inventory: {}\ncallGraph:\n  checkout: [payments]\n\
         reporters:\n  inventroy: [shop/checkout]\n  inventory: [shop/checkout]\n  payments: [shop/checkout]\n  ledger: [shop/*]\n",
    );
    let flagged: Vec<_> = other_rules(&lint)
        .into_iter()
        .filter(|(_, rule)| *rule == Rule::UnknownReporterDependency.code())
        .collect();
    assert_eq!(
        flagged,
        [
            ("inventroy", "unknown-reporter-dependency"),
            ("ledger", "unknown-reporter-dependency")
        ]
    );
    let typo = message(&lint, "inventroy", Rule::UnknownReporterDependency);
    assert!(typo.contains(r#"did you mean "inventory"?"#), "{typo}");
    assert!(!message(&lint, "ledger", Rule::UnknownReporterDependency).contains("did you mean"));
}

#[test]
fn each_service_gets_a_forecast_of_the_seed_scenario() {
    let yaml = std::fs::read_to_string("../../policies/retry-policy.yaml").unwrap();
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
    let yaml = "defaults:\n  maxRetries: 10\n  maxElapsed: 60s\nservices:\n  plain: {}\n  paced:\n    gate:\n      enabled: true\n";
    let lint = lint_yaml(yaml);
    let forecast = |name: &str| lint.forecasts.iter().find(|f| f.service == name).unwrap();
    let (plain, paced) = (forecast("plain"), forecast("paced"));
    assert!(!plain.paced && paced.paced);
    for forecast in [plain, paced] {
        assert_eq!(
            forecast.fleet.shape,
            "1000 calls from 50 processes through 2 daemon replicas pacing apart (no shared pace store), 1ms latency, \
             against a quota of 200 a second",
            "the default fleet, for every policy"
        );
    }
    assert_eq!(
        (plain.succeeded, plain.gave_up),
        (0, 1000),
        "10 jittered retries are spent in the outage"
    );
    assert!(
        paced.succeeded >= 990,
        "paced calls wait for turns within their 60 s: {paced:?}"
    );
    assert!(
        paced.wasted * 4 < plain.wasted,
        "{} vs {}",
        paced.wasted,
        plain.wasted
    );
}

#[test]
fn each_outage_of_a_services_forecast_is_run_and_explained() {
    let lint = lint_yaml(
        "defaults: {maxRetries: 3}\n\
         services:\n  steady: {maxRetries: 100, initialDelay: 1s, maxDelay: 8s, jitter: decorrelated}\n  silent: {maxRetries: 0}\n\
         forecast:\n  outages: [2s, 10s]\n  services:\n    steady: {clients: 500, capacity: 100}\n",
    );
    let of = |service: &str| -> Vec<&Forecast> {
        lint.forecasts.iter().filter(|f| f.service == service).collect()
    };
    let defaults = of("(defaults)");
    let outages: Vec<f64> = defaults.iter().map(|f| f.outage_seconds).collect();
    assert_eq!(outages, [2.0, 10.0]);
    assert_eq!((defaults[1].succeeded, defaults[1].gave_up), (0, 1000));
    let explained = &defaults[1].explanation;
    assert!(
        explained
            .starts_with("every call fails: its 3 retries are spent within 1.05s, before a 10s outage ends"),
        "{explained}"
    );
    assert!(explained.contains("4.0 refused requests per call") && explained.contains("stormguard tune"));
    let steady = of("steady");
    assert_eq!((steady[0].clients, steady[0].capacity), (500, 100));
    assert_eq!(steady[1].succeeded, 500);
    assert!(
        steady[1]
            .explanation
            .starts_with("serves every call, 99 % within"),
        "{}",
        steady[1].explanation
    );
    assert!(steady[1].explanation.contains("stormguard tune --service steady"));
    assert!(of("silent")[0]
        .explanation
        .starts_with("every call fails: it does not retry"));
}

#[test]
fn per_process_floors_that_outweigh_the_ratio_over_the_processes_seen_are_warned() {
    let yaml = "services:\n  orders: {}\n  ledger:\n    budget: {scope: fleet}\n  quiet:\n    budget: {minRetriesPerSecond: 0}\n";
    let document = load_bytes("test.yaml", yaml.as_bytes(), LoadLimits::default()).unwrap();
    let claims = |processes, requests_per_second| Claims {
        requests_per_second,
        processes,
    };
    let seen = [
        ("orders".to_string(), claims(200, 1000.0)),
        ("ledger".to_string(), claims(200, 1000.0)),
        ("quiet".to_string(), claims(200, 1000.0)),
        ("unlisted".to_string(), claims(3, 1000.0)),
        ("alone".to_string(), claims(1, 1.0)),
    ];
    let warnings = live_risks(&document, &seen);
    let found: Vec<(&str, &str)> = warnings
        .iter()
        .map(|w| (w.service.as_str(), w.rule.code()))
        .collect();
    assert_eq!(
        found,
        [("orders", "process-floors")],
        "the fleet-scoped, the floorless, the few and the lone process bind"
    );
    assert_eq!(
        warnings[0].message,
        "the budget's floor of 10 retries a second is each process's: the 200 processes seen calling it may \
         retry 2000 a second in all whatever their traffic, while its ratio allows 200 a second at the 1000 \
         first tries a second they send, so the budget never binds when the service fails; set \
         `budget.scope: fleet` to share one floor among them, or lower minRetriesPerSecond"
    );
}

#[test]
fn a_gate_that_makes_every_call_critical_or_lets_critical_calls_wait_less_is_warned() {
    let yaml = "defaults:\n  budget: {enabled: true}\nservices:\n  all-critical:\n    gate: {enabled: true, criticality: critical}\n  inverted:\n    gate:\n      enabled: true\n      maxWait: {critical: 500ms, default: 1s}\n  fine:\n    gate: {enabled: true}\n  ungated:\n    gate: {enabled: false, criticality: critical}\n";
    let lint = lint_yaml(yaml);
    let rules = |service: &str| {
        lint.warnings
            .iter()
            .filter(|w| w.service == service && w.rule != Rule::ShortRetrySpan)
            .map(|w| (w.rule, w.message.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rules("all-critical")[0].0,
        Rule::CriticalByDefault,
        "{:?}",
        lint.warnings
    );
    let inverted = rules("inverted");
    assert_eq!(inverted.len(), 1, "{inverted:?}");
    assert_eq!(inverted[0].0, Rule::WaitBoundsInverted);
    assert!(
        inverted[0]
            .1
            .contains("critical calls may wait for a turn 500ms and default ones 1s"),
        "{}",
        inverted[0].1
    );
    assert!(rules("fine").is_empty(), "{:?}", rules("fine"));
    assert!(
        rules("ungated").is_empty(),
        "no gate, no classes: {:?}",
        rules("ungated")
    );
}
