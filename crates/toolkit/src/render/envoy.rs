//! Envoy v3: the fields of a route's action (`config.route.v3.RouteAction`:
//! `retry_policy`, `timeout`, `hedge_policy`) and of the service's cluster
//! (`config.cluster.v3.Cluster`: a retry budget and outlier detection), to
//! merge into the route and cluster that reach the service. Keys are the
//! protobuf JSON names (`retryPolicy`), which Envoy's YAML reads as it reads
//! the field names (`retry_policy`).

use serde_json::{json, Map, Value};
use stormguard_core::policy::{BudgetScope, RetryCondition, RetryPolicy};

use super::{conditions, proto_duration, Losses};

pub(super) fn render(policy: &RetryPolicy, lost: &mut Losses) -> Value {
    let mut route = Map::new();
    if policy.max_retries > 0 {
        lost.full_jitter_backoff(policy, "Envoy", true);
        let mut retry = Map::new();
        let (retry_on, codes) = retry_on(policy);
        retry.insert("retryOn".into(), json!(retry_on));
        retry.insert("numRetries".into(), json!(policy.max_retries));
        if !codes.is_empty() {
            retry.insert("retriableStatusCodes".into(), json!(codes));
        }
        if let Some(per_try) = policy.per_try_timeout {
            retry.insert("perTryTimeout".into(), json!(proto_duration(per_try)));
        }
        retry.insert(
            "retryBackOff".into(),
            json!({
                "baseInterval": proto_duration(policy.initial_delay.max(std::time::Duration::from_millis(1))),
                "maxInterval": proto_duration(policy.max_delay.max(std::time::Duration::from_millis(1))),
            }),
        );
        route.insert("retryPolicy".into(), Value::Object(retry));
    }
    if let Some(deadline) = policy.max_elapsed {
        route.insert("timeout".into(), json!(proto_duration(deadline)));
    }
    if policy.hedging.enabled {
        route.insert(
            "hedgePolicy".into(),
            json!({"initialRequests": 1, "hedgeOnPerTryTimeout": true}),
        );
        lost.lose(
            "hedging",
            "Envoy hedges only when an attempt reaches perTryTimeout, not after hedging.delay, and one hedge at a time",
        );
    }
    let mut cluster = Map::new();
    if policy.budget.enabled {
        cluster.insert(
            "circuitBreakers".into(),
            json!({"thresholds": [{
                "retryBudget": {
                    "budgetPercent": {"value": policy.budget.retry_ratio * 100.0},
                    "minRetryConcurrency": policy.budget.min_retries_per_second,
                },
            }]}),
        );
        lost.lose(
            "budget.minRetriesPerSecond",
            "Envoy's budget counts retries in flight, not per second: minRetryConcurrency takes the number",
        );
        lost.lose(
            "budget.ttl",
            "Envoy's budget is a share of the requests active now; there is no window",
        );
        if policy.budget.scope == BudgetScope::Fleet {
            lost.lose(
                "budget.scope",
                "Envoy's budget is each proxy's: the fleet's floor becomes every proxy's, multiplied by the proxies",
            );
        }
    }
    if policy.retry_throttling.enabled {
        lost.lose(
            "retryThrottling",
            "Envoy has no token bucket for retries; the budget is its equivalent",
        );
    }
    if policy.circuit_breaker.enabled {
        cluster.insert("outlierDetection".into(), outlier_detection(policy));
        lost.lose(
            "circuitBreaker",
            "rendered as outlier detection: Envoy ejects hosts after consecutive 5xx, one by one, rather than \
             stopping calls to the service; failure and slow-call rates and half-open trials are lost",
        );
    }
    json!({"route": route, "cluster": cluster})
}

fn outlier_detection(policy: &RetryPolicy) -> Value {
    let breaker = &policy.circuit_breaker;
    json!({
        "consecutive5xx": breaker.consecutive_failures.max(1),
        "baseEjectionTime": proto_duration(breaker.open_timeout.max(std::time::Duration::from_millis(1))),
    })
}

/// Envoy's `retry_on` and its retriable status codes. (Envoy's `5xx`
/// includes 501, which the policy's `5xx` leaves out.)
pub(super) fn retry_on(policy: &RetryPolicy) -> (String, Vec<u16>) {
    let (named, codes) = conditions(policy);
    let mut on: Vec<&str> = named
        .iter()
        .map(|condition| match condition {
            RetryCondition::ConnectFailure => "connect-failure",
            // Envoy's `reset` covers an upstream that does not answer in time.
            RetryCondition::Timeout | RetryCondition::Reset => "reset",
            RetryCondition::ServerError => "5xx",
            RetryCondition::GatewayError => "gateway-error",
            RetryCondition::Status(_) => "retriable-status-codes",
        })
        .collect();
    if !codes.is_empty() {
        on.push("retriable-status-codes");
    }
    let mut unique = Vec::new();
    for condition in on {
        if !unique.contains(&condition) {
            unique.push(condition);
        }
    }
    (unique.join(","), codes)
}
