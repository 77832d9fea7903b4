//! Retry budgets: limits on retries as a share of traffic, shared by every
//! task that calls one service, so that a failing dependency sees a bounded
//! amount of extra load however many callers retry at once.
//!
//! - [`RetryBudget`] is Finagle's budget, as in Linkerd and tower: over a
//!   sliding window of `ttl`, retries may be at most `retryRatio` of the
//!   requests plus `minRetriesPerSecond × ttl`.
//! - [`RetryThrottle`] is gRPC's retry throttling: a token bucket that loses
//!   a token per failure and regains `tokenRatio` per success; retries are
//!   allowed only while more than half the tokens remain.
//!
//! Both are shared through an `Arc` and use atomics only: no lock on the hot
//! path. Under contention a check and its increment may interleave, so a
//! budget can be overdrawn by at most one retry per racing task.
//!
//! ```
//! use stormguard_core::budget::RetryBudget;
//! use stormguard_core::policy::BudgetPolicy;
//!
//! // 20 % of requests, plus 1 retry a second over a 10 s window.
//! let budget = RetryBudget::new(&BudgetPolicy { min_retries_per_second: 1, ..BudgetPolicy::default() });
//! for _ in 0..100 {
//!     budget.deposit(); // every first attempt
//! }
//! let retries = (0..1000).take_while(|_| budget.try_retry()).count();
//! assert_eq!(retries, 30); // 0.2 × 100 + 1/s × 10 s
//! ```

mod ratio;
mod throttle;

pub use ratio::{BudgetSnapshot, RetryBudget};
pub use throttle::RetryThrottle;
