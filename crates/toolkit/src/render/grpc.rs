//! A gRPC service config (gRFC A6), for a channel's default service config
//! or a name resolver's: one `methodConfig` for every method, with a
//! `retryPolicy` or a `hedgingPolicy`, the call's `timeout`, and
//! `retryThrottling`.

use serde_json::{json, Map, Value};
use stormguard_core::policy::{RetryCondition, RetryPolicy};

use super::{conditions, proto_duration, Losses};

/// gRPC's cap on attempts, retries and hedges alike: a larger value is cut to it.
const MAX_ATTEMPTS: u32 = 5;

pub(super) fn render(policy: &RetryPolicy, lost: &mut Losses) -> Value {
    let mut method = Map::new();
    method.insert("name".into(), json!([{}]));
    let codes = status_codes(policy, lost);
    if policy.hedging.enabled {
        let attempts = attempts(
            policy.hedging.max_hedges.saturating_add(1),
            "hedging.maxHedges",
            lost,
        );
        method.insert(
            "hedgingPolicy".into(),
            json!({
                "maxAttempts": attempts,
                "hedgingDelay": proto_duration(policy.hedging.delay),
                "nonFatalStatusCodes": codes,
            }),
        );
        if policy.max_retries > 0 {
            lost.lose(
                "maxRetries",
                "gRPC hedges or retries a method, not both: the hedging policy is rendered",
            );
        }
    } else if policy.max_retries > 0 {
        let attempts = attempts(policy.max_retries.saturating_add(1), "maxRetries", lost);
        lost.full_jitter_backoff(policy, "gRPC", false);
        method.insert(
            "retryPolicy".into(),
            json!({
                "maxAttempts": attempts,
                "initialBackoff": proto_duration(policy.initial_delay.max(std::time::Duration::from_millis(1))),
                "maxBackoff": proto_duration(policy.max_delay.max(std::time::Duration::from_millis(1))),
                "backoffMultiplier": policy.multiplier,
                "retryableStatusCodes": codes,
            }),
        );
    }
    if let Some(deadline) = policy.max_elapsed {
        method.insert("timeout".into(), json!(proto_duration(deadline)));
    }
    if policy.per_try_timeout.is_some() {
        lost.lose(
            "perTryTimeout",
            "gRPC has no timeout per attempt, only per call (timeout, from maxElapsed)",
        );
    }
    let mut config = Map::new();
    config.insert("methodConfig".into(), json!([method]));
    if policy.retry_throttling.enabled {
        config.insert(
            "retryThrottling".into(),
            json!({
                "maxTokens": policy.retry_throttling.max_tokens,
                "tokenRatio": policy.retry_throttling.token_ratio,
            }),
        );
    }
    if policy.budget.enabled {
        lost.lose(
            "budget",
            "gRPC has no ratio budget; its token bucket is retryThrottling, which the policy can set instead",
        );
    }
    if policy.circuit_breaker.enabled {
        lost.lose(
            "circuitBreaker",
            "gRPC has no circuit breaker in its service config",
        );
    }
    Value::Object(config)
}

/// `wanted` attempts, cut to gRPC's cap (and the cut said).
fn attempts(wanted: u32, key: &'static str, lost: &mut Losses) -> u32 {
    if wanted > MAX_ATTEMPTS {
        lost.lose(
            key,
            format!("gRPC makes at most {MAX_ATTEMPTS} attempts; {wanted} are cut to {MAX_ATTEMPTS}"),
        );
    }
    wanted.min(MAX_ATTEMPTS)
}

/// The gRPC status codes the policy's retry conditions stand for: what a
/// gRPC client sees when the server is unreachable, overloaded or slow.
fn status_codes(policy: &RetryPolicy, lost: &mut Losses) -> Vec<&'static str> {
    let (named, codes) = conditions(policy);
    let mut out = Vec::new();
    let mut add = |code| {
        if !out.contains(&code) {
            out.push(code);
        }
    };
    for condition in named {
        match condition {
            RetryCondition::ConnectFailure | RetryCondition::Reset | RetryCondition::GatewayError => {
                add("UNAVAILABLE")
            }
            RetryCondition::ServerError => {
                add("UNAVAILABLE");
                add("INTERNAL");
            }
            RetryCondition::Timeout => add("DEADLINE_EXCEEDED"),
            RetryCondition::Status(_) => {}
        }
    }
    for code in codes {
        match code {
            429 => add("RESOURCE_EXHAUSTED"),
            502 | 503 => add("UNAVAILABLE"),
            504 => add("DEADLINE_EXCEEDED"),
            500 => add("INTERNAL"),
            other => lost.lose("retryOn", format!("HTTP {other} has no gRPC status of its own")),
        }
    }
    if out.is_empty() {
        lost.lose(
            "retryOn",
            "gRPC needs a status to retry on; UNAVAILABLE stands in",
        );
        return vec!["UNAVAILABLE"];
    }
    out
}
