//! The sliding windows a closed breaker judges its failure and slow-call
//! rates over: the last N calls, or the calls of the last T (Resilience4j).

use std::time::Duration;

use tokio::time::Instant;

use crate::policy::SlidingWindow;

/// Buckets a time window is divided into: it slides in steps of `duration / 20`.
const BUCKETS: usize = 20;

/// Calls, failed calls and slow calls in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls recorded.
    pub calls: u32,
    /// Of those, calls that failed.
    pub failures: u32,
    /// Of those, calls slower than `slowCallDuration` (failed or not).
    pub slow: u32,
}

impl Tally {
    fn add(&mut self, failed: bool, slow: bool) {
        self.calls = self.calls.saturating_add(1);
        self.failures = self.failures.saturating_add(u32::from(failed));
        self.slow = self.slow.saturating_add(u32::from(slow));
    }

    fn remove(&mut self, failed: bool, slow: bool) {
        self.calls -= 1;
        self.failures -= u32::from(failed);
        self.slow -= u32::from(slow);
    }
}

/// A breaker's window of recent calls.
#[derive(Debug)]
pub(super) enum Window {
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    pub(super) fn new(shape: SlidingWindow, now: Instant) -> Self {
        match shape {
            SlidingWindow::Count { calls } => Window::Count(CountWindow::new(calls.max(1))),
            SlidingWindow::Time { duration } => Window::Time(TimeWindow::new(duration, now)),
        }
    }

    /// The most calls the window can hold, if it is count-based.
    pub(super) fn capacity(&self) -> Option<u32> {
        match self {
            Window::Count(w) => Some(w.outcomes.len() as u32),
            Window::Time(_) => None,
        }
    }

    pub(super) fn record(&mut self, now: Instant, failed: bool, slow: bool) {
        match self {
            Window::Count(w) => w.record(failed, slow),
            Window::Time(w) => w.record(now, failed, slow),
        }
    }

    pub(super) fn tally(&self, now: Instant) -> Tally {
        match self {
            Window::Count(w) => w.tally,
            Window::Time(w) => w.tally(now),
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Window::Count(w) => *w = CountWindow::new(w.outcomes.len() as u32),
            Window::Time(w) => w.buckets.iter_mut().for_each(|b| *b = Bucket::default()),
        }
    }
}

/// A ring of the last N outcomes, with running totals.
#[derive(Debug)]
pub(super) struct CountWindow {
    /// Bit 0: failed; bit 1: slow; bit 2: the slot holds a call.
    outcomes: Box<[u8]>,
    next: usize,
    tally: Tally,
}

const FAILED: u8 = 1;
const SLOW: u8 = 2;
const USED: u8 = 4;

impl CountWindow {
    fn new(calls: u32) -> Self {
        Self {
            outcomes: vec![0; calls as usize].into_boxed_slice(),
            next: 0,
            tally: Tally::default(),
        }
    }

    fn record(&mut self, failed: bool, slow: bool) {
        let old = self.outcomes[self.next];
        if old & USED != 0 {
            self.tally.remove(old & FAILED != 0, old & SLOW != 0);
        }
        self.outcomes[self.next] = USED | if failed { FAILED } else { 0 } | if slow { SLOW } else { 0 };
        self.tally.add(failed, slow);
        self.next = (self.next + 1) % self.outcomes.len();
    }
}

/// Calls of the last `duration`, kept in [`BUCKETS`] steps.
#[derive(Debug)]
pub(super) struct TimeWindow {
    start: Instant,
    step: Duration,
    buckets: Box<[Bucket; BUCKETS]>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    step: u64,
    tally: Tally,
}

impl TimeWindow {
    fn new(duration: Duration, now: Instant) -> Self {
        Self {
            start: now,
            step: (duration / BUCKETS as u32).max(Duration::from_nanos(1)),
            buckets: Box::new([Bucket::default(); BUCKETS]),
        }
    }

    fn step_at(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_nanos() / self.step.as_nanos();
        u64::try_from(elapsed).unwrap_or(u64::MAX)
    }

    fn record(&mut self, now: Instant, failed: bool, slow: bool) {
        let step = self.step_at(now);
        let bucket = &mut self.buckets[(step % BUCKETS as u64) as usize];
        if bucket.step != step {
            *bucket = Bucket {
                step,
                tally: Tally::default(),
            };
        }
        bucket.tally.add(failed, slow);
    }

    fn tally(&self, now: Instant) -> Tally {
        let step = self.step_at(now);
        let mut total = Tally::default();
        for bucket in self.buckets.iter() {
            if step.saturating_sub(bucket.step) < BUCKETS as u64 && bucket.step <= step {
                total.calls = total.calls.saturating_add(bucket.tally.calls);
                total.failures = total.failures.saturating_add(bucket.tally.failures);
                total.slow = total.slow.saturating_add(bucket.tally.slow);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_window_forgets_the_oldest_call() {
        let now = Instant::now();
        let mut w = Window::new(SlidingWindow::Count { calls: 3 }, now);
        w.record(now, true, true);
        w.record(now, false, false);
        w.record(now, false, true);
        assert_eq!(
            w.tally(now),
            Tally {
                calls: 3,
                failures: 1,
                slow: 2
            }
        );
        w.record(now, false, false);
        assert_eq!(
            w.tally(now),
            Tally {
                calls: 3,
                failures: 0,
                slow: 1
            }
        );
        w.clear();
        assert_eq!(w.tally(now), Tally::default());
    }

    #[test]
    fn a_time_window_forgets_calls_older_than_its_duration() {
        let t0 = Instant::now();
        let mut w = Window::new(
            SlidingWindow::Time {
                duration: Duration::from_secs(10),
            },
            t0,
        );
        w.record(t0, true, false);
        w.record(t0 + Duration::from_secs(5), false, false);
        assert_eq!(w.tally(t0 + Duration::from_secs(9)).calls, 2);
        let later = w.tally(t0 + Duration::from_millis(10_500));
        assert_eq!(
            later,
            Tally {
                calls: 1,
                failures: 0,
                slow: 0
            },
            "the first call slid out"
        );
        assert_eq!(w.tally(t0 + Duration::from_secs(3600)), Tally::default());
    }
}
