//! What a recovering server does with a request once it is up and the
//! random failures and backends down have had their say: take it, or refuse
//! it because a limit is reached. One limit per
//! [`Dependency`](stormguard_core::policy::Dependency) model, each at the
//! capacity in force when the request arrives (a brownout's, a partial
//! world's share).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use stormguard_core::policy::Dependency;

const NANOS_PER_SECOND: f64 = 1e9;

/// The limit's state.
#[derive(Debug)]
pub(super) enum Limit {
    /// Counts per calendar second, kept by the server (its `accepted`).
    Quota,
    /// Tokens, as of `at`.
    Bucket { burst: f64, tokens: f64, at: u64 },
    /// Requests counted in the current calendar second and the one before.
    Window {
        second: u64,
        current: u64,
        previous: u64,
    },
    /// When each busy worker is next free, and when each request waiting
    /// for one will start (in order: first come, first served).
    Workers {
        workers: u32,
        queue: usize,
        free_at: BinaryHeap<Reverse<u64>>,
        starts: VecDeque<u64>,
    },
}

/// What the limit does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// Refused at once: the limit is reached.
    Refused,
    /// Served; the answer leaves the server at this instant (nanoseconds).
    Served(u64),
}

impl Limit {
    /// The limit of `dependency`, full (a bucket) or idle (workers) at t = 0.
    pub(super) fn of(dependency: Dependency) -> Self {
        match dependency {
            Dependency::Quota => Self::Quota,
            Dependency::TokenBucket { burst } => Self::Bucket {
                burst: f64::from(burst),
                tokens: f64::from(burst),
                at: 0,
            },
            Dependency::RequestRate => Self::Window {
                second: 0,
                current: 0,
                previous: 0,
            },
            Dependency::Concurrency { workers, queue } => Self::Workers {
                workers,
                queue: queue as usize,
                free_at: BinaryHeap::new(),
                starts: VecDeque::new(),
            },
        }
    }

    /// A request at `t` while the dependency takes `capacity` a second;
    /// `accepted_this_second` is what a quota has taken in `t`'s second.
    pub(super) fn take(&mut self, t: u64, capacity: u64, accepted_this_second: u64) -> Taken {
        match self {
            Self::Quota => match accepted_this_second < capacity {
                true => Taken::Served(t),
                false => Taken::Refused,
            },
            Self::Bucket { burst, tokens, at } => {
                let refill = t.saturating_sub(*at) as f64 / NANOS_PER_SECOND * capacity as f64;
                *tokens = (*tokens + refill).min(*burst);
                *at = (*at).max(t);
                if *tokens >= 1.0 {
                    *tokens -= 1.0;
                    Taken::Served(t)
                } else {
                    Taken::Refused
                }
            }
            Self::Window {
                second,
                current,
                previous,
            } => {
                let now = t / NANOS_PER_SECOND as u64;
                if now != *second {
                    *previous = if now == *second + 1 { *current } else { 0 };
                    *current = 0;
                    *second = now;
                }
                *current += 1;
                let left = 1.0 - (t % NANOS_PER_SECOND as u64) as f64 / NANOS_PER_SECOND;
                let counted = *current as f64 + *previous as f64 * left;
                match counted > capacity as f64 {
                    true => Taken::Refused,
                    false => Taken::Served(t),
                }
            }
            Self::Workers {
                workers,
                queue,
                free_at,
                starts,
            } => {
                if capacity == 0 {
                    return Taken::Refused;
                }
                while starts.front().is_some_and(|&start| start <= t) {
                    starts.pop_front();
                }
                while free_at.peek().is_some_and(|Reverse(at)| *at <= t) {
                    free_at.pop();
                }
                let idle = free_at.len() < *workers as usize;
                let start = match idle {
                    true => t,
                    false => free_at.peek().map_or(t, |Reverse(at)| (*at).max(t)),
                };
                if start > t && starts.len() >= *queue {
                    return Taken::Refused;
                }
                if !idle {
                    free_at.pop();
                }
                let service = (f64::from(*workers) / capacity as f64 * NANOS_PER_SECOND) as u64;
                let done = start.saturating_add(service);
                free_at.push(Reverse(done));
                if start > t {
                    starts.push_back(start);
                }
                Taken::Served(done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn served(limit: &mut Limit, t: u64, capacity: u64) -> Option<u64> {
        match limit.take(t, capacity, 0) {
            Taken::Served(at) => Some(at),
            Taken::Refused => None,
        }
    }

    #[test]
    fn a_bucket_takes_its_burst_at_once_then_its_rate() {
        let mut bucket = Limit::of(Dependency::TokenBucket { burst: 20 });
        let at_once = (0..100)
            .filter(|_| served(&mut bucket, 10_000 * MS, 200).is_some())
            .count();
        assert_eq!(at_once, 20, "full after an idle time: the burst, no more");
        // 200 a second is one every 5 ms: over the next second, 200 of 400.
        let then = (1..=400)
            .filter(|i| served(&mut bucket, 10_000 * MS + i * 5 * MS / 2, 200).is_some())
            .count();
        assert_eq!(then, 200);
    }

    #[test]
    fn a_bucket_refills_no_further_than_its_burst() {
        let mut bucket = Limit::of(Dependency::TokenBucket { burst: 5 });
        assert!((0..5).all(|_| served(&mut bucket, 0, 100).is_some()));
        assert_eq!(served(&mut bucket, 0, 100), None, "empty");
        assert_eq!(
            served(&mut bucket, 10 * MS, 100),
            Some(10 * MS),
            "one token in 10 ms"
        );
        let after_a_minute = (0..50)
            .filter(|_| served(&mut bucket, 60_000 * MS, 100).is_some())
            .count();
        assert_eq!(after_a_minute, 5);
    }

    #[test]
    fn workers_serve_at_their_pace_queue_the_rest_and_refuse_past_the_queue() {
        // 2 workers at 100/s: 20 ms a request; a queue of 3.
        let mut pool = Limit::of(Dependency::Concurrency { workers: 2, queue: 3 });
        let answers: Vec<Option<u64>> = (0..7).map(|_| served(&mut pool, 0, 100)).collect();
        assert_eq!(
            answers,
            [
                Some(20 * MS),
                Some(20 * MS),
                Some(40 * MS),
                Some(40 * MS),
                Some(60 * MS),
                None,
                None
            ],
            "two at once, three waiting, then refused"
        );
        // Two started at 20 ms: one waits now, room for two more.
        assert_eq!(served(&mut pool, 20 * MS, 100), Some(60 * MS));
        assert_eq!(served(&mut pool, 20 * MS, 100), Some(80 * MS));
        assert_eq!(served(&mut pool, 20 * MS, 100), None);
        assert_eq!(served(&mut pool, 500 * MS, 100), Some(520 * MS), "idle again");
    }

    #[test]
    fn workers_slow_down_in_a_brownout() {
        let mut pool = Limit::of(Dependency::Concurrency {
            workers: 10,
            queue: 0,
        });
        assert_eq!(
            served(&mut pool, 0, 100),
            Some(100 * MS),
            "10 workers at 100/s: 100 ms each"
        );
        assert_eq!(served(&mut pool, 0, 25), Some(400 * MS), "at a quarter: 400 ms");
        assert_eq!(served(&mut pool, 0, 0), None, "none at all");
    }

    #[test]
    fn a_request_rate_counts_what_it_refuses_and_refuses_everything_past_its_limit() {
        let mut window = Limit::of(Dependency::RequestRate);
        // 300 a second, evenly, against a limit of 200: the first 200 of the
        // first second pass; from then on the count stays above the limit.
        let taken: Vec<bool> = (0..900u64)
            .map(|i| served(&mut window, i * 1_000 * MS / 300, 200).is_some())
            .collect();
        assert_eq!(taken[..300].iter().filter(|t| **t).count(), 200);
        assert_eq!(taken[300..].iter().filter(|t| **t).count(), 0, "refused whole");
        // Below the limit it takes everything.
        let mut window = Limit::of(Dependency::RequestRate);
        let slow = (0..600u64)
            .filter(|i| served(&mut window, i * 1_000 * MS / 190, 200).is_some())
            .count();
        assert_eq!(slow, 600);
        // The second before weighs by what is left of this one.
        let mut window = Limit::of(Dependency::RequestRate);
        assert!((0..200).all(|_| served(&mut window, 500 * MS, 200).is_some()));
        assert_eq!(served(&mut window, 1_000 * MS, 200), None, "1 + 200 counted");
        assert!(
            served(&mut window, 1_500 * MS, 200).is_some(),
            "2 + 200 x 0.5 counted"
        );
    }

    #[test]
    fn a_quota_counts_its_second() {
        let mut quota = Limit::of(Dependency::Quota);
        assert_eq!(quota.take(5, 200, 199), Taken::Served(5));
        assert_eq!(quota.take(5, 200, 200), Taken::Refused);
    }
}
