//! Linkerd (2.16 and later): retry, timeout and failure-accrual annotations
//! on the service's Service, as a merge patch (`kubectl patch service NAME
//! --type merge -p ...`).

use serde_json::{json, Map, Value};
use stormguard_core::policy::{GoDuration, RetryCondition, RetryPolicy};

use super::{conditions, Losses, Target};

pub(super) fn render(target: Target<'_>, policy: &RetryPolicy, lost: &mut Losses) -> Value {
    let mut annotations = Map::new();
    let mut put = |key: &str, value: String| {
        annotations.insert(key.to_owned(), Value::String(value));
    };
    if policy.max_retries > 0 {
        put("retry.linkerd.io/http", statuses(policy, lost));
        put("retry.linkerd.io/limit", policy.max_retries.to_string());
        if let Some(per_try) = policy.per_try_timeout {
            put("retry.linkerd.io/timeout", GoDuration(per_try).to_string());
        }
        for key in ["initialDelay", "maxDelay", "multiplier", "jitter"] {
            lost.lose(key, "Linkerd retries without a backoff");
        }
    }
    if let Some(deadline) = policy.max_elapsed {
        put("timeout.linkerd.io/request", GoDuration(deadline).to_string());
    }
    if policy.circuit_breaker.enabled {
        let breaker = &policy.circuit_breaker;
        put("balancer.linkerd.io/failure-accrual", "consecutive".into());
        put(
            "balancer.linkerd.io/failure-accrual-consecutive-max-failures",
            breaker.consecutive_failures.max(1).to_string(),
        );
        put(
            "balancer.linkerd.io/failure-accrual-consecutive-min-penalty",
            GoDuration(breaker.open_timeout).to_string(),
        );
        lost.lose(
            "circuitBreaker",
            "rendered as failure accrual: Linkerd takes endpoints out after consecutive failures, one by one, \
             rather than stopping calls to the service; failure and slow-call rates are lost",
        );
    }
    if policy.budget.enabled {
        lost.lose(
            "budget",
            "Linkerd's annotation retries have no budget (only a ServiceProfile's retries had one)",
        );
    }
    if policy.retry_throttling.enabled {
        lost.lose("retryThrottling", "Linkerd has no retry throttling");
    }
    if policy.hedging.enabled {
        lost.lose("hedging", "Linkerd does not hedge");
    }
    json!({"metadata": {"name": target.service, "namespace": target.namespace, "annotations": annotations}})
}

/// `retry.linkerd.io/http`: `5xx`, `gateway-error` and single codes.
fn statuses(policy: &RetryPolicy, lost: &mut Losses) -> String {
    let (named, codes) = conditions(policy);
    let mut out: Vec<String> = Vec::new();
    for condition in named {
        match condition {
            RetryCondition::ServerError => out.push("5xx".into()),
            RetryCondition::GatewayError => out.push("gateway-error".into()),
            RetryCondition::ConnectFailure | RetryCondition::Reset | RetryCondition::Timeout => lost.lose(
                "retryOn",
                format!(
                    "Linkerd retries on HTTP statuses; {} is its proxy's to handle",
                    condition_name(condition)
                ),
            ),
            RetryCondition::Status(_) => {}
        }
    }
    out.extend(codes.iter().map(u16::to_string));
    if out.is_empty() {
        out.push("5xx".into());
        lost.lose(
            "retryOn",
            "Linkerd needs an HTTP status to retry on; 5xx stands in",
        );
    }
    out.join(",")
}

fn condition_name(condition: RetryCondition) -> &'static str {
    match condition {
        RetryCondition::ConnectFailure => "connect-failure",
        RetryCondition::Reset => "reset",
        _ => "timeout",
    }
}
