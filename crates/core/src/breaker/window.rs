//! The sliding windows a closed breaker judges its failure and slow-call
//! rates over: the last N calls, or the calls of the last T (Resilience4j).
//! Each also knows which of its failures belong to a long run (one of
//! `consecutiveFailures` or more), so that the background rate a run is
//! judged against leaves earlier runs out.

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

/// The calls of a window outside long runs of failures, and how many of
/// them failed: the background a run of failures is judged against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Background {
    /// Calls in the window that were not failures of a long run.
    pub calls: u32,
    /// Of those, calls that failed.
    pub failures: u32,
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

    /// Records a call. A failure continues the current run of failures
    /// (a long one, if [`long_run`](Self::long_run) said so); a success
    /// ends it.
    pub(super) fn record(&mut self, now: Instant, failed: bool, slow: bool) {
        match self {
            Window::Count(w) => w.record(failed, slow),
            Window::Time(w) => w.record(now, failed, slow),
        }
    }

    /// The run of failures just recorded is a long one: its failures still
    /// in the window, and those still to come, are left out of the
    /// [`background`](Self::background).
    pub(super) fn long_run(&mut self) {
        match self {
            Window::Count(w) => w.long_run(),
            Window::Time(w) => w.long_run(),
        }
    }

    /// The window's calls and failures outside long runs.
    pub(super) fn background(&self, now: Instant) -> Background {
        let (tally, in_runs) = match self {
            Window::Count(w) => (w.tally, w.in_runs),
            Window::Time(w) => w.tally_and_runs(now),
        };
        Background {
            calls: tally.calls.saturating_sub(in_runs),
            failures: tally.failures.saturating_sub(in_runs),
        }
    }

    pub(super) fn tally(&self, now: Instant) -> Tally {
        match self {
            Window::Count(w) => w.tally,
            Window::Time(w) => w.tally_and_runs(now).0,
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Window::Count(w) => *w = CountWindow::new(w.outcomes.len() as u32),
            Window::Time(w) => {
                w.buckets.iter_mut().for_each(|b| *b = Bucket::default());
                w.long = false;
                w.pending = false;
            }
        }
    }
}

/// A ring of the last N outcomes, with running totals.
#[derive(Debug)]
pub(super) struct CountWindow {
    /// Bit 0: failed; bit 1: slow; bit 2: the slot holds a call; bit 3: a
    /// failure of a long run.
    outcomes: Box<[u8]>,
    next: usize,
    tally: Tally,
    /// Slots holding a failure of a long run.
    in_runs: u32,
    /// Whether the current run of failures is a long one.
    long: bool,
}

const FAILED: u8 = 1;
const SLOW: u8 = 2;
const USED: u8 = 4;
const IN_RUN: u8 = 8;

impl CountWindow {
    fn new(calls: u32) -> Self {
        Self {
            outcomes: vec![0; calls as usize].into_boxed_slice(),
            next: 0,
            tally: Tally::default(),
            in_runs: 0,
            long: false,
        }
    }

    fn record(&mut self, failed: bool, slow: bool) {
        let old = self.outcomes[self.next];
        if old & USED != 0 {
            self.tally.remove(old & FAILED != 0, old & SLOW != 0);
            self.in_runs -= u32::from(old & IN_RUN != 0);
        }
        self.long &= failed;
        let in_run = if self.long { IN_RUN } else { 0 };
        self.outcomes[self.next] =
            USED | if failed { FAILED } else { 0 } | if slow { SLOW } else { 0 } | in_run;
        self.in_runs += u32::from(self.long);
        self.tally.add(failed, slow);
        self.next = (self.next + 1) % self.outcomes.len();
    }

    /// Marks the current run's failures, newest first, back to the
    /// success (or empty slot) before it.
    fn long_run(&mut self) {
        if self.long {
            return;
        }
        self.long = true;
        let len = self.outcomes.len();
        for back in 1..=len {
            let slot = &mut self.outcomes[(self.next + len - back) % len];
            if *slot & (USED | FAILED | IN_RUN) != USED | FAILED {
                break;
            }
            *slot |= IN_RUN;
            self.in_runs += 1;
        }
    }
}

/// Calls of the last `duration`, kept in [`BUCKETS`] steps.
#[derive(Debug)]
pub(super) struct TimeWindow {
    start: Instant,
    step: Duration,
    buckets: Box<[Bucket; BUCKETS]>,
    /// Whether the current run of failures is a long one.
    long: bool,
    /// Whether any bucket holds failures of the current run, not yet
    /// known to be long.
    pending: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    step: u64,
    tally: Tally,
    /// Failures of long runs.
    in_runs: u32,
    /// Failures of the current run while it is not (yet) long.
    pending: u32,
}

impl TimeWindow {
    fn new(duration: Duration, now: Instant) -> Self {
        Self {
            start: now,
            step: (duration / BUCKETS as u32).max(Duration::from_nanos(1)),
            buckets: Box::new([Bucket::default(); BUCKETS]),
            long: false,
            pending: false,
        }
    }

    fn step_at(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.start).as_nanos() / self.step.as_nanos();
        u64::try_from(elapsed).unwrap_or(u64::MAX)
    }

    fn record(&mut self, now: Instant, failed: bool, slow: bool) {
        let step = self.step_at(now);
        if !failed {
            self.long = false;
            if self.pending {
                self.buckets.iter_mut().for_each(|b| b.pending = 0);
                self.pending = false;
            }
        }
        let bucket = &mut self.buckets[(step % BUCKETS as u64) as usize];
        if bucket.step != step {
            *bucket = Bucket {
                step,
                ..Bucket::default()
            };
        }
        bucket.tally.add(failed, slow);
        if failed && self.long {
            bucket.in_runs = bucket.in_runs.saturating_add(1);
        } else if failed {
            bucket.pending = bucket.pending.saturating_add(1);
            self.pending = true;
        }
    }

    /// Counts the current run's failures, in whichever buckets they fell,
    /// as a long run's.
    fn long_run(&mut self) {
        if self.long {
            return;
        }
        self.long = true;
        for bucket in self.buckets.iter_mut() {
            bucket.in_runs = bucket.in_runs.saturating_add(std::mem::take(&mut bucket.pending));
        }
        self.pending = false;
    }

    /// The window's tally, and how many of its failures belong to long runs.
    fn tally_and_runs(&self, now: Instant) -> (Tally, u32) {
        let step = self.step_at(now);
        let mut total = Tally::default();
        let mut in_runs = 0u32;
        for bucket in self.buckets.iter() {
            if step.saturating_sub(bucket.step) < BUCKETS as u64 && bucket.step <= step {
                total.calls = total.calls.saturating_add(bucket.tally.calls);
                total.failures = total.failures.saturating_add(bucket.tally.failures);
                total.slow = total.slow.saturating_add(bucket.tally.slow);
                in_runs = in_runs.saturating_add(bucket.in_runs);
            }
        }
        (total, in_runs)
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
    fn a_long_runs_failures_stay_out_of_the_background_until_they_slide_out() {
        let t0 = Instant::now();
        let shapes = [
            SlidingWindow::Count { calls: 8 },
            SlidingWindow::Time {
                duration: Duration::from_secs(10),
            },
        ];
        for shape in shapes {
            let mut w = Window::new(shape, t0);
            let at = |i: u64| t0 + Duration::from_millis(900 * i);
            // Success, failure, success, then a run of three that is long from
            // its second failure on, a success, and a run not (yet) long.
            for (i, failed) in [false, true, false, true, true, true, false, true]
                .into_iter()
                .enumerate()
            {
                w.record(at(i as u64), failed, false);
                if i == 4 {
                    w.long_run();
                }
            }
            let now = at(7);
            assert_eq!(w.tally(now).failures, 5, "{shape:?}");
            assert_eq!(
                w.background(now),
                Background {
                    calls: 5,
                    failures: 2
                },
                "{shape:?}"
            );
            // The calls up to the run's first two slide out: 8 more calls, or 4.5 s.
            let later = match shape {
                SlidingWindow::Count { .. } => {
                    for _ in 0..5 {
                        w.record(now, false, false);
                    }
                    now
                }
                SlidingWindow::Time { .. } => at(7) + Duration::from_millis(7_500),
            };
            assert_eq!(
                w.background(later).failures,
                1,
                "{shape:?}: the last failure is background"
            );
            assert_eq!(
                w.tally(later).failures,
                2,
                "{shape:?}: one of the run's failures is left"
            );
            w.clear();
            w.record(later, true, false);
            assert_eq!(
                w.background(later),
                Background {
                    calls: 1,
                    failures: 1
                },
                "{shape:?}"
            );
        }
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
