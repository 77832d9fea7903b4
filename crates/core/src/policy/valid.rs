//! [`ValidPolicy`]: a policy proven to be within every range, the only kind
//! the code that acts on a policy accepts.
//!
//! A policy reaches a client from the daemon's JSON or from a cache file,
//! and either can be wrong: a `perTryTimeoutMs` of 1e22 would overflow the
//! clock, a breaker window of a billion calls would allocate gigabytes. The
//! daemon checks a file with the same rules ([`check`](super::validate::check)),
//! but a client must not trust bytes it read; so the only way to a
//! [`Guard`](crate::guard::Guard) is through [`ValidPolicy::try_from`].

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

use super::model::RetryPolicy;
use super::validate::{check, Violation};

/// A [`RetryPolicy`] that passed every range and consistency check. Built
/// only by [`TryFrom`] (or deserialized, which checks the same way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicy", into = "RetryPolicy")]
pub struct ValidPolicy(RetryPolicy);

/// Why a policy is not valid: every violation found, each naming its keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidPolicy {
    /// The problems, in the order the checks found them.
    pub violations: Vec<Violation>,
}

impl fmt::Display for InvalidPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems: Vec<String> = self
            .violations
            .iter()
            .map(|v| format!("{}: {}", v.keys.join(", "), v.message))
            .collect();
        write!(f, "invalid policy: {}", problems.join("; "))
    }
}

impl TryFrom<RetryPolicy> for ValidPolicy {
    type Error = InvalidPolicy;

    fn try_from(policy: RetryPolicy) -> Result<Self, Self::Error> {
        let violations = check(&policy);
        if violations.is_empty() {
            Ok(Self(policy))
        } else {
            Err(InvalidPolicy { violations })
        }
    }
}

impl From<ValidPolicy> for RetryPolicy {
    fn from(valid: ValidPolicy) -> Self {
        valid.0
    }
}

impl Deref for ValidPolicy {
    type Target = RetryPolicy;

    fn deref(&self) -> &RetryPolicy {
        &self.0
    }
}

impl Default for ValidPolicy {
    /// The built-in policy, which is valid.
    fn default() -> Self {
        Self(RetryPolicy::default())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::SlidingWindow;

    #[test]
    fn the_built_in_policy_is_valid() {
        assert_eq!(
            ValidPolicy::try_from(RetryPolicy::default()),
            Ok(ValidPolicy::default())
        );
    }

    #[test]
    fn out_of_range_settings_are_refused_with_their_keys() {
        let mut policy = RetryPolicy {
            per_try_timeout: Some(Duration::from_secs(10_000_000_000_000_000_000)),
            ..RetryPolicy::default()
        };
        policy.circuit_breaker.sliding_window = SlidingWindow::Count { calls: 1_000_000_000 };
        let error = ValidPolicy::try_from(policy).unwrap_err();
        let keys: Vec<_> = error.violations.iter().map(|v| v.keys[0]).collect();
        assert_eq!(keys, ["perTryTimeout", "circuitBreaker.slidingWindow"]);
        assert!(error
            .to_string()
            .starts_with("invalid policy: perTryTimeout: must be between"));
    }

    #[test]
    fn not_a_number_is_out_of_every_range() {
        for policy in [
            RetryPolicy {
                multiplier: f64::NAN,
                ..RetryPolicy::default()
            },
            RetryPolicy {
                jitter_factor: f64::NAN,
                ..RetryPolicy::default()
            },
        ] {
            assert!(ValidPolicy::try_from(policy).is_err());
        }
        let mut throttled = RetryPolicy::default();
        throttled.retry_throttling.token_ratio = f64::NAN;
        assert!(ValidPolicy::try_from(throttled).is_err());
    }

    #[test]
    fn json_is_checked_as_it_is_read() {
        let mut json = serde_json::to_value(ValidPolicy::default()).unwrap();
        assert!(serde_json::from_value::<ValidPolicy>(json.clone()).is_ok());
        json["perTryTimeoutMs"] = serde_json::json!(1e22);
        let error = serde_json::from_value::<ValidPolicy>(json).unwrap_err();
        assert!(error.to_string().contains("perTryTimeout"), "{error}");
    }
}
