//! Finagle's retry budget, as in Linkerd and tower: over a sliding window
//! of `ttl`, retries may be at most `retryRatio` of the requests plus
//! `minRetriesPerSecond × ttl`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::BudgetPolicy;

/// Slots the sliding window is divided into: the window advances in steps of `ttl / 10`.
const SLOTS: usize = 10;

/// A retry budget (Finagle, Linkerd, tower's `TpsBudget`).
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    /// `minRetriesPerSecond × ttl`, as `f64` bits: a fleet-scoped budget's
    /// share of the floor is set from outside the call path.
    reserve: AtomicU64,
    ttl_seconds: f64,
    slot_nanos: u64,
    start: Instant,
    slots: [Slot; SLOTS],
    denied: AtomicU64,
}

/// Counts for one step of the window.
#[derive(Debug, Default)]
struct Slot {
    requests: StepCount,
    retries: StepCount,
}

/// A count and the window step it belongs to, in one atomic word: the low
/// 32 bits of the step above, the count (saturating at `u32::MAX`) below.
/// One word, so that moving to a new step and counting in it is one
/// compare-and-swap: a reset and a concurrent increment cannot interleave.
/// Steps are compared modulo 2^32, so a slot left untouched for exactly a
/// multiple of 2^32 steps (13 years of 100 ms steps) would read as current.
#[derive(Debug, Default)]
struct StepCount(AtomicU64);

impl StepCount {
    /// Counts one at step `epoch`. A late count (for a step older than the
    /// one held) goes to the step held rather than wiping it.
    fn add(&self, epoch: u64) {
        let step = epoch as u32;
        let _ = self.0.fetch_update(Relaxed, Relaxed, |word| {
            let (held, count) = ((word >> 32) as u32, word as u32);
            let newer = (step.wrapping_sub(held) as i32) > 0;
            Some(if newer {
                (u64::from(step) << 32) | 1
            } else {
                (word & !u64::from(u32::MAX)) | u64::from(count.saturating_add(1))
            })
        });
    }

    /// The count, if its step is among the `SLOTS` steps up to `now`.
    fn live(&self, now: u64) -> u64 {
        let word = self.0.load(Relaxed);
        let age = (now as u32).wrapping_sub((word >> 32) as u32);
        if (age as usize) < SLOTS {
            word & u64::from(u32::MAX)
        } else {
            0
        }
    }
}

/// A budget's state, for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSnapshot {
    /// Requests seen in the window.
    pub requests: u64,
    /// Retries spent in the window.
    pub retries: u64,
    /// Retries the window allows in all.
    pub allowed: f64,
    /// Share of the allowance left, in [0, 1].
    pub remaining_ratio: f64,
    /// Retries refused since the budget was created.
    pub denied: u64,
}

impl RetryBudget {
    /// A budget from a policy's `budget` block. Its ranges are checked when
    /// the policy is validated: `retryRatio` in [0, 1000], `minRetriesPerSecond`
    /// up to 1,000,000, `ttl` from 1 s to 60 s (tower's bounds).
    pub fn new(policy: &BudgetPolicy) -> Self {
        Self::new_at(policy, Instant::now())
    }

    /// [`new`](Self::new) at a given instant (for simulations in virtual time).
    pub fn new_at(policy: &BudgetPolicy, now: Instant) -> Self {
        let ttl = policy.ttl.max(Duration::from_millis(SLOTS as u64));
        Self {
            ratio: policy.retry_ratio.max(0.0),
            reserve: AtomicU64::new((f64::from(policy.min_retries_per_second) * ttl.as_secs_f64()).to_bits()),
            ttl_seconds: ttl.as_secs_f64(),
            slot_nanos: u64::try_from((ttl / SLOTS as u32).as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            start: now,
            slots: Default::default(),
            denied: AtomicU64::new(0),
        }
    }

    /// Counts a request (first attempts only: retries are counted by [`try_retry`](Self::try_retry)).
    pub fn deposit(&self) {
        self.deposit_at(Instant::now());
    }

    /// [`deposit`](Self::deposit) at a given instant.
    pub fn deposit_at(&self, now: Instant) {
        let epoch = self.epoch_at(now);
        self.slot(epoch).requests.add(epoch);
    }

    /// Takes one retry from the budget if it allows one; counts a refusal otherwise.
    pub fn try_retry(&self) -> bool {
        self.try_retry_at(Instant::now())
    }

    /// [`try_retry`](Self::try_retry) at a given instant.
    pub fn try_retry_at(&self, now: Instant) -> bool {
        let epoch = self.epoch_at(now);
        let (requests, retries) = self.window(epoch);
        if (retries as f64) < self.allowance(requests) {
            self.slot(epoch).retries.add(epoch);
            true
        } else {
            self.denied.fetch_add(1, Relaxed);
            false
        }
    }

    /// The budget's state now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let (requests, retries) = self.window(self.epoch_at(Instant::now()));
        let allowed = self.allowance(requests);
        let remaining_ratio = if allowed > 0.0 {
            ((allowed - retries as f64) / allowed).clamp(0.0, 1.0)
        } else {
            0.0
        };
        BudgetSnapshot {
            requests,
            retries,
            allowed,
            remaining_ratio,
            denied: self.denied.load(Relaxed),
        }
    }

    /// Sets the retries always allowed per second: a fleet-scoped budget's
    /// share of the fleet's floor. Negative or not a number counts as 0.
    pub fn set_min_retries_per_second(&self, per_second: f64) {
        let per_second = if per_second > 0.0 { per_second } else { 0.0 };
        self.reserve
            .store((per_second * self.ttl_seconds).to_bits(), Relaxed);
    }

    fn allowance(&self, requests: u64) -> f64 {
        f64::from_bits(self.reserve.load(Relaxed)) + self.ratio * requests as f64
    }

    /// The window step at `now`. In whole nanoseconds: a u128 division would
    /// cost more than the rest of a budget check.
    fn epoch_at(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start);
        let nanos = elapsed
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(elapsed.subsec_nanos()));
        nanos / self.slot_nanos
    }

    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// Requests and retries over the steps still inside the window at step `now`.
    fn window(&self, now: u64) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(requests, retries), slot| {
            (
                requests + slot.requests.live(now),
                retries + slot.retries.live(now),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min_per_second: u32) -> RetryBudget {
        RetryBudget::new(&BudgetPolicy {
            enabled: true,
            retry_ratio: ratio,
            min_retries_per_second: min_per_second,
            ttl: Duration::from_secs(10),
            ..BudgetPolicy::default()
        })
    }

    fn spend(budget: &RetryBudget) -> u32 {
        (0..10_000).take_while(|_| budget.try_retry()).count() as u32
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_a_share_of_requests_plus_a_reserve() {
        let b = budget(0.2, 1);
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!(spend(&b), 30, "20 % of 100 requests + 1/s × 10 s");
        let snapshot = b.snapshot();
        assert_eq!(
            (snapshot.requests, snapshot.retries, snapshot.denied),
            (100, 30, 1)
        );
        assert_eq!(snapshot.remaining_ratio, 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_slides_past_ttl() {
        let b = budget(0.5, 0);
        for _ in 0..10 {
            b.deposit();
        }
        assert_eq!(spend(&b), 5);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!b.try_retry(), "still inside the 10 s window");
        for _ in 0..4 {
            b.deposit();
        }
        assert_eq!(spend(&b), 2, "(10 + 4) / 2 = 7 allowed, 5 spent");
        tokio::time::advance(Duration::from_millis(5_001)).await;
        assert_eq!(b.snapshot().requests, 4, "the first 10 requests left the window");
        assert_eq!(b.snapshot().retries, 2);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(b.snapshot().requests, 0, "everything expired");
        assert_eq!(spend(&b), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_floor_set_from_outside_replaces_the_policys() {
        let b = budget(0.0, 10);
        assert_eq!(spend(&b), 100, "10 a second over the 10 s window");
        tokio::time::advance(Duration::from_secs(11)).await;
        b.set_min_retries_per_second(0.5);
        assert_eq!(spend(&b), 5, "the fleet's part: half a retry a second");
        tokio::time::advance(Duration::from_secs(11)).await;
        b.set_min_retries_per_second(f64::NAN);
        assert_eq!(spend(&b), 0, "nonsense counts as no floor");
    }

    /// Eight OS threads spend one budget at once: the allowance holds, give
    /// or take one retry per racing thread.
    #[test]
    fn shared_across_threads_never_overdrawn_by_more_than_the_racers() {
        let b = budget(0.1, 0);
        for _ in 0..1000 {
            b.deposit();
        }
        let granted: u32 = std::thread::scope(|scope| {
            let spenders: Vec<_> = (0..8).map(|_| scope.spawn(|| spend(&b))).collect();
            spenders.into_iter().map(|s| s.join().unwrap()).sum()
        });
        assert!(
            (100..=108).contains(&granted),
            "{granted} retries granted for an allowance of 100"
        );
        assert_eq!(b.snapshot().retries, u64::from(granted));
    }

    /// Threads cross into new window steps together, round after round:
    /// every deposit of a step is in its slot, none wiped by the rollover.
    #[test]
    fn a_slot_rollover_loses_no_concurrent_deposit() {
        const THREADS: u64 = 4;
        const PER_THREAD: u64 = 16;
        const ROUNDS: u64 = 3000;
        let start = Instant::now();
        let b = RetryBudget::new_at(&BudgetPolicy::default(), start);
        let step = Duration::from_nanos(b.slot_nanos);
        let barrier = std::sync::Barrier::new(THREADS as usize);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for round in 0..ROUNDS {
                        let now = start + step * round as u32;
                        barrier.wait();
                        for _ in 0..PER_THREAD {
                            b.deposit_at(now);
                        }
                        barrier.wait();
                        let in_window = (round + 1).min(SLOTS as u64);
                        let (requests, _) = b.window(b.epoch_at(now));
                        assert_eq!(requests, THREADS * PER_THREAD * in_window, "round {round}");
                        barrier.wait();
                    }
                });
            }
        });
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Within one window, a retry is granted exactly while the retries
            /// so far are fewer than ratio × requests so far + the reserve.
            #[test]
            fn retries_never_exceed_the_allowance(
                ratio in 0.0f64..2.0,
                per_second in 0u32..5,
                ops in prop::collection::vec(any::<bool>(), 0..500),
            ) {
                let b = budget(ratio, per_second);
                let reserve = f64::from(per_second) * 10.0;
                let (mut requests, mut retries) = (0u64, 0u64);
                for deposit in ops {
                    if deposit {
                        b.deposit();
                        requests += 1;
                    } else {
                        let allowed = (retries as f64) < ratio * requests as f64 + reserve;
                        prop_assert_eq!(b.try_retry(), allowed);
                        retries += u64::from(allowed);
                    }
                }
                prop_assert_eq!((b.snapshot().requests, b.snapshot().retries), (requests, retries));
            }
        }
    }
}
