//! Tests of the gRPC service config and mesh renderings: what each takes of a policy and what it
//! says it cannot.

use std::time::Duration;

use serde_json::json;
use stormguard_core::policy::{HedgingPolicy, PolicyDocument};

use super::*;
use crate::policy::{load_bytes, LoadLimits};

const TARGET: Target<'static> = Target {
    service: "payment-service",
    namespace: "shop",
};

/// The shipped policy file's defaults: 3 retries from 100ms, ±50 %, a budget.
fn shipped() -> RetryPolicy {
    let text = std::fs::read_to_string("../../policies/retry-policy.yaml").unwrap();
    let document: PolicyDocument = load_bytes("shipped", text.as_bytes(), LoadLimits::default()).unwrap();
    document.defaults_policy()
}

fn keys(rendering: &Rendering) -> Vec<&'static str> {
    rendering.lost.iter().map(|l| l.key).collect()
}

#[test]
fn durations_are_written_as_protobuf_writes_them() {
    assert_eq!(proto_duration(Duration::from_millis(100)), "0.1s");
    assert_eq!(proto_duration(Duration::from_secs(10)), "10s");
    assert_eq!(proto_duration(Duration::from_micros(1_500_250)), "1.50025s");
}

#[test]
fn grpc_takes_the_backoff_the_codes_and_the_deadline_and_says_what_it_cannot() {
    let policy = RetryPolicy {
        max_elapsed: Some(Duration::from_secs(30)),
        per_try_timeout: Some(Duration::from_secs(2)),
        ..shipped()
    };
    let r = render(TARGET, &policy, Format::Grpc);
    assert_eq!(
        r.document,
        json!({"methodConfig": [{
            "name": [{}],
            "retryPolicy": {
                "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "10s", "backoffMultiplier": 2.0,
                "retryableStatusCodes": ["UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED"],
            },
            "timeout": "30s",
        }]})
    );
    assert_eq!(keys(&r), ["jitter", "perTryTimeout", "budget"]);
    assert!(
        r.lost[0].why.ends_with("(full jitter), not proportional"),
        "{:?}",
        r.lost[0]
    );
}

#[test]
fn grpc_cuts_attempts_to_five_and_hedges_instead_of_retrying_when_asked_to() {
    let many = RetryPolicy {
        max_retries: 10,
        ..shipped()
    };
    let r = render(TARGET, &many, Format::Grpc);
    assert_eq!(r.document["methodConfig"][0]["retryPolicy"]["maxAttempts"], 5);
    assert!(r
        .lost
        .iter()
        .any(|l| l.key == "maxRetries" && l.why.contains("11 are cut to 5")));
    let hedged = RetryPolicy {
        hedging: HedgingPolicy {
            enabled: true,
            delay: Duration::from_millis(50),
            max_hedges: 2,
        },
        ..shipped()
    };
    let r = render(TARGET, &hedged, Format::Grpc);
    let method = &r.document["methodConfig"][0];
    assert_eq!(method["hedgingPolicy"]["maxAttempts"], 3);
    assert_eq!(method["hedgingPolicy"]["hedgingDelay"], "0.05s");
    assert!(method.get("retryPolicy").is_none());
    assert!(keys(&r).contains(&"maxRetries"));
}

#[test]
fn envoy_puts_retries_on_the_route_and_the_budget_on_the_cluster() {
    let r = render(TARGET, &shipped(), Format::Envoy);
    assert_eq!(
        r.document["route"]["retryPolicy"],
        json!({
            "retryOn": "connect-failure,reset,5xx,retriable-status-codes",
            "numRetries": 3,
            "retriableStatusCodes": [429],
            "retryBackOff": {"baseInterval": "0.1s", "maxInterval": "10s"},
        })
    );
    assert_eq!(
        r.document["cluster"]["circuitBreakers"]["thresholds"][0]["retryBudget"]["budgetPercent"]["value"],
        20.0
    );
    assert_eq!(keys(&r), ["jitter", "budget.minRetriesPerSecond", "budget.ttl"]);
    let mut fleet = shipped();
    fleet.budget.scope = stormguard_core::policy::BudgetScope::Fleet;
    let r = render(TARGET, &fleet, Format::Envoy);
    assert_eq!(
        keys(&r),
        [
            "jitter",
            "budget.minRetriesPerSecond",
            "budget.ttl",
            "budget.scope"
        ],
        "a fleet's floor cannot be one per proxy"
    );
}

#[test]
fn istio_retries_on_the_virtual_service_and_cannot_set_a_backoff() {
    let mut policy = shipped();
    policy.circuit_breaker.enabled = true;
    let r = render(TARGET, &policy, Format::Istio);
    let objects = r.document.as_array().unwrap();
    assert_eq!(objects[0]["kind"], "VirtualService");
    assert_eq!(objects[0]["metadata"]["namespace"], "shop");
    assert_eq!(
        objects[0]["spec"]["http"][0]["retries"],
        json!({"attempts": 3, "retryOn": "connect-failure,reset,5xx,429"})
    );
    assert_eq!(objects[1]["kind"], "DestinationRule");
    assert_eq!(
        objects[1]["spec"]["trafficPolicy"]["outlierDetection"]["consecutive5xxErrors"],
        5
    );
    assert_eq!(
        keys(&r),
        [
            "initialDelay",
            "maxDelay",
            "multiplier",
            "jitter",
            "circuitBreaker",
            "budget"
        ]
    );
}

#[test]
fn linkerd_annotates_the_service_and_leaves_connection_failures_to_its_proxy() {
    let policy = RetryPolicy {
        per_try_timeout: Some(Duration::from_millis(300)),
        max_elapsed: Some(Duration::from_secs(5)),
        ..shipped()
    };
    let r = render(TARGET, &policy, Format::Linkerd);
    assert_eq!(
        r.document["metadata"]["annotations"],
        json!({
            "retry.linkerd.io/http": "5xx,429",
            "retry.linkerd.io/limit": "3",
            "retry.linkerd.io/timeout": "300ms",
            "timeout.linkerd.io/request": "5s",
        })
    );
    let lost = keys(&r);
    assert_eq!(
        &lost[..3],
        ["retryOn", "retryOn", "retryOn"],
        "connect-failure, timeout, reset"
    );
    assert!(lost.contains(&"budget"));
}

#[test]
fn a_policy_that_does_not_retry_renders_no_retries_anywhere() {
    let none = RetryPolicy {
        max_retries: 0,
        ..shipped()
    };
    assert!(render(TARGET, &none, Format::Grpc).document["methodConfig"][0]
        .get("retryPolicy")
        .is_none());
    assert!(render(TARGET, &none, Format::Envoy).document["route"]
        .get("retryPolicy")
        .is_none());
    assert_eq!(
        render(TARGET, &none, Format::Istio).document[0]["spec"]["http"][0]["retries"]["attempts"],
        0
    );
    assert!(
        render(TARGET, &none, Format::Linkerd).document["metadata"]["annotations"]
            .get("retry.linkerd.io/limit")
            .is_none()
    );
}

#[test]
fn the_send_gate_is_lost_in_every_dialect_and_said() {
    let mut policy = shipped();
    policy.gate.enabled = true;
    for format in Format::ALL {
        assert_eq!(render(TARGET, &policy, format).lost[0].key, "gate", "{format}");
    }
}
