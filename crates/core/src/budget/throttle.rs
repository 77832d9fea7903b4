//! gRPC's retry throttling: a token bucket that loses a token per failure
//! and regains `tokenRatio` per success; retries are allowed only while
//! more than half the tokens remain.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::policy::RetryThrottlingPolicy;

/// gRPC retry throttling: a token bucket over the successes and failures of calls.
#[derive(Debug)]
pub struct RetryThrottle {
    /// Tokens in thousandths, as gRPC keeps `tokenRatio` to three decimals.
    milli_tokens: AtomicU64,
    max: u64,
    per_success: u64,
}

impl RetryThrottle {
    /// A full bucket from a policy's `retryThrottling` block (`maxTokens` 1 to
    /// 1000, `tokenRatio` above 0 and at most 1000, checked by validation).
    pub fn new(policy: &RetryThrottlingPolicy) -> Self {
        let max = u64::from(policy.max_tokens).saturating_mul(1000);
        Self {
            milli_tokens: AtomicU64::new(max),
            max,
            per_success: (policy.token_ratio.max(0.0) * 1000.0) as u64,
        }
    }

    /// A failed call takes a token.
    pub fn on_failure(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_sub(1000)));
    }

    /// A successful call returns `tokenRatio` tokens, up to the bucket's size.
    pub fn on_success(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Relaxed, Relaxed, |t| Some((t + self.per_success).min(self.max)));
    }

    /// Whether a retry may be sent: more than half the tokens remain.
    pub fn allows_retry(&self) -> bool {
        self.milli_tokens.load(Relaxed) > self.max / 2
    }

    /// Tokens left, as a share of the bucket.
    pub fn remaining_ratio(&self) -> f64 {
        self.milli_tokens.load(Relaxed) as f64 / self.max.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_stops_retries_below_half_and_recovers_on_success() {
        let t = RetryThrottle::new(&RetryThrottlingPolicy {
            enabled: true,
            max_tokens: 10,
            token_ratio: 0.1,
        });
        assert!(t.allows_retry());
        for _ in 0..5 {
            t.on_failure();
        }
        assert_eq!(t.remaining_ratio(), 0.5);
        assert!(!t.allows_retry(), "retries stop at half, as in gRPC");
        for _ in 0..100 {
            t.on_failure();
        }
        assert_eq!(t.remaining_ratio(), 0.0, "never below empty");
        for _ in 0..51 {
            t.on_success();
        }
        assert!(t.allows_retry(), "51 successes × 0.1 = 5.1 tokens");
        for _ in 0..1000 {
            t.on_success();
        }
        assert_eq!(t.remaining_ratio(), 1.0, "never above full");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// The throttle's tokens stay within [0, maxTokens], and retries are
            /// allowed exactly while more than half remain.
            #[test]
            fn throttle_tokens_stay_in_the_bucket(
                max_tokens in 1u32..1000,
                ratio in 0.001f64..10.0,
                ops in prop::collection::vec(any::<bool>(), 0..500),
            ) {
                let t = RetryThrottle::new(&RetryThrottlingPolicy { enabled: true, max_tokens, token_ratio: ratio });
                let mut milli = u64::from(max_tokens) * 1000;
                for success in ops {
                    if success {
                        t.on_success();
                        milli = (milli + (ratio * 1000.0) as u64).min(u64::from(max_tokens) * 1000);
                    } else {
                        t.on_failure();
                        milli = milli.saturating_sub(1000);
                    }
                    prop_assert!((0.0..=1.0).contains(&t.remaining_ratio()));
                    prop_assert_eq!(t.allows_retry(), milli > u64::from(max_tokens) * 500);
                }
            }
        }
    }
}
