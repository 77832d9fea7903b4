//! Istio: a VirtualService whose route to the service retries as the policy
//! says, and, with a circuit breaker, a DestinationRule's outlier detection.

use serde_json::{json, Value};
use stormguard_core::policy::RetryPolicy;

use super::{conditions, proto_duration, Losses, Target};

pub(super) fn render(target: Target<'_>, policy: &RetryPolicy, lost: &mut Losses) -> Value {
    let service = target.service;
    let mut http = json!({"route": [{"destination": {"host": service}}]});
    let retries = if policy.max_retries > 0 {
        let (named, codes) = conditions(policy);
        let mut on: Vec<String> = super::envoy::retry_on(policy)
            .0
            .split(',')
            .map(str::to_owned)
            .collect();
        // Istio takes status codes in retryOn itself.
        on.retain(|c| c != "retriable-status-codes");
        on.extend(codes.iter().map(u16::to_string));
        if named.is_empty() && codes.is_empty() {
            on.push("5xx".into());
        }
        let mut retries = json!({"attempts": policy.max_retries, "retryOn": on.join(",")});
        if let Some(per_try) = policy.per_try_timeout {
            retries["perTryTimeout"] = json!(proto_duration(per_try));
        }
        for key in ["initialDelay", "maxDelay", "multiplier", "jitter"] {
            lost.lose(
                key,
                "Istio does not set the backoff: Envoy's default applies (25ms base, 250ms cap, full jitter)",
            );
        }
        retries
    } else {
        json!({"attempts": 0})
    };
    http["retries"] = retries;
    if let Some(deadline) = policy.max_elapsed {
        http["timeout"] = json!(proto_duration(deadline));
    }
    let mut objects = vec![json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": format!("{service}-retries"), "namespace": target.namespace},
        "spec": {"hosts": [service], "http": [http]},
    })];
    if policy.circuit_breaker.enabled {
        let breaker = &policy.circuit_breaker;
        objects.push(json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": {"name": format!("{service}-outliers"), "namespace": target.namespace},
            "spec": {"host": service, "trafficPolicy": {"outlierDetection": {
                "consecutive5xxErrors": breaker.consecutive_failures.max(1),
                "baseEjectionTime": proto_duration(breaker.open_timeout.max(std::time::Duration::from_millis(1))),
            }}},
        }));
        lost.lose(
            "circuitBreaker",
            "rendered as outlier detection: Istio ejects hosts after consecutive 5xx, one by one, rather than \
             stopping calls to the service; failure and slow-call rates and half-open trials are lost",
        );
    }
    if policy.budget.enabled {
        lost.lose("budget", "Istio has no retry budget");
    }
    if policy.retry_throttling.enabled {
        lost.lose("retryThrottling", "Istio has no retry throttling");
    }
    if policy.hedging.enabled {
        lost.lose("hedging", "Istio does not hedge");
    }
    Value::Array(objects)
}
