//! How long the fleet's feedback loop takes, and the timers sized from it.
//!
//! A grant changes what a process sends only once the process has heard
//! it, and the daemon hears what came of it only at the process's next
//! ask: from a change of the rate to its outcomes is about two ask
//! intervals. A process asks every [`ASK_EVERY`] with one ask in flight, so
//! across a link slower than that its asks come a round trip apart. The
//! interval between a process's asks, as the daemon sees them arrive,
//! measures its link without a clock shared with the process, as TCP
//! measures its round trip from its own acknowledgements. The law's
//! rounds, episodes and waits, how long a process counts after its last
//! ask and how long its grant lasts are sized from it; at the interval of
//! a daemon nearby they are the times they were tuned as, and a slower
//! loop stretches them rather than outrunning its own feedback.

use std::time::Duration;

use super::{ASK_EVERY, ROUND};

/// Rounds per ask interval, once the interval is longer than
/// [`ASK_EVERY`]: a round takes two intervals (a grant heard, its outcomes
/// reported) and a half more for the asks that fall between.
const ROUNDS_PER_INTERVAL: f64 = 2.5;
/// Asks a process may miss before it no longer counts in the division.
const SILENT_ASKS: u32 = 3;
/// Asks a process may miss before it is forgotten.
const FORGOTTEN_ASKS: u32 = 20;
/// Asks a grant lasts: a few lost ones change nothing.
const LEASE_ASKS: u32 = 10;
/// The ask interval from which the fleet no longer steers: its round is a
/// second, and a recovery's few seconds are a handful of rounds, later than
/// each process's gate reacts alone. In the simulator's herd at a 500 ms
/// round trip the fleet was 0.9 s behind per-process gates on a worker pool
/// and 4.8 s on a limit that counts its refusals (bench/loops.py).
const STEERS_BELOW: Duration = Duration::from_millis(400);
/// The weight of each new interval in a process's measure of its own.
const NEW_INTERVAL_WEIGHT: f64 = 0.125;
/// A new interval counts for at most this many times the measure: a
/// process whose gate was off for a while, then on again, asked late once,
/// not because its link slowed.
const LONGEST_SAMPLE: f64 = 4.0;

/// The longest interval taken: a process that took longer to ask again had
/// its gate off meanwhile, or lost its asks; a loop slower than this cannot
/// steer a recovery, and its leases stay within twenty seconds.
const LONGEST: Duration = Duration::from_secs(2);

/// Intervals a process's measure rests on before it counts in the fleet's:
/// one late ask (a process busy, an ask retried) does not hand the fleet
/// over, three in a row do.
const SETTLED_AFTER: u32 = 3;

/// The fleet's feedback loop, as the interval between a process's asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    interval: Duration,
    /// Intervals measured so far (at most [`SETTLED_AFTER`]).
    samples: u32,
}

impl Default for Feedback {
    /// A daemon nearby: its processes ask every [`ASK_EVERY`].
    fn default() -> Self {
        Self {
            interval: ASK_EVERY,
            samples: 0,
        }
    }
}

impl Feedback {
    /// Asks `interval` apart (taken for no shorter than [`ASK_EVERY`], and
    /// no longer than two seconds), as settled as a measure gets.
    pub fn of_interval(interval: Duration) -> Self {
        Self {
            interval: interval.clamp(ASK_EVERY, LONGEST),
            samples: SETTLED_AFTER,
        }
    }

    /// Whether the measure rests on enough intervals to speak for the
    /// fleet's loop.
    pub fn is_settled(&self) -> bool {
        self.samples >= SETTLED_AFTER
    }

    /// The interval between asks.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The measure after an ask `elapsed` after the one before: the first
    /// interval as it is (as TCP takes its first round trip), then an
    /// average that weighs each an eighth, as TCP's smoothed round trip.
    pub fn heard_after(&self, elapsed: Duration) -> Self {
        let interval = if self.samples == 0 {
            elapsed
        } else {
            let now = self.interval.as_secs_f64();
            let sample = elapsed.as_secs_f64().min(LONGEST_SAMPLE * now);
            Duration::from_secs_f64(now + NEW_INTERVAL_WEIGHT * (sample - now))
        };
        Self {
            interval: interval.clamp(ASK_EVERY, LONGEST),
            samples: (self.samples + 1).min(SETTLED_AFTER),
        }
    }

    /// Whether a loop this long can steer a recovery: if not, the fleet
    /// hands the processes' own gates the wheel.
    pub fn steers(&self) -> bool {
        self.interval < STEERS_BELOW
    }

    /// A round of the law: 250 ms nearby, two and a half intervals across
    /// a slower link.
    pub fn round(&self) -> Duration {
        ROUND.max(self.interval.mul_f64(ROUNDS_PER_INTERVAL))
    }

    /// How long a process counts after its last ask: three asks.
    pub fn silent_after(&self) -> Duration {
        self.interval * SILENT_ASKS
    }

    /// How long a process is known after its last ask: twenty asks.
    pub fn forget_after(&self) -> Duration {
        self.interval * FORGOTTEN_ASKS
    }

    /// How long a grant lasts: ten asks.
    pub fn lease(&self) -> Duration {
        self.interval * LEASE_ASKS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_the_timers_are_those_the_law_was_tuned_with() {
        let near = Feedback::default();
        assert_eq!(near.round(), Duration::from_millis(250));
        assert_eq!(near.silent_after(), Duration::from_millis(300));
        assert_eq!(near.forget_after(), Duration::from_secs(2));
        assert_eq!(near.lease(), Duration::from_secs(1));
        let fast = Feedback::of_interval(Duration::from_millis(20));
        assert_eq!(fast.interval(), ASK_EVERY, "never faster than asked");
        let stalled = Feedback::default().heard_after(Duration::from_secs(30));
        assert_eq!(stalled.interval(), Duration::from_secs(2));
        assert_eq!(stalled.lease(), Duration::from_secs(20));
    }

    #[test]
    fn a_slow_link_stretches_every_timer_with_its_interval() {
        let steering = Feedback::of_interval(Duration::from_millis(399));
        assert!(steering.steers() && Feedback::default().steers());
        let slow = Feedback::of_interval(Duration::from_millis(400));
        assert!(!slow.steers(), "a round of a second steers too late");
        assert_eq!(slow.round(), Duration::from_secs(1));
        assert_eq!(slow.silent_after(), Duration::from_millis(1_200));
        assert_eq!(slow.lease(), Duration::from_secs(4));
    }

    #[test]
    fn the_measure_follows_the_asks_and_shrugs_off_one_late_one() {
        let first = Feedback::default().heard_after(Duration::from_millis(300));
        assert_eq!(first.interval(), Duration::from_millis(300), "the first as it is");
        assert!(!first.is_settled(), "one interval does not speak for the loop");
        let third = first
            .heard_after(Duration::from_millis(300))
            .heard_after(Duration::from_millis(300));
        assert!(third.is_settled());
        let mut feedback = first;
        for _ in 0..40 {
            feedback = feedback.heard_after(Duration::from_millis(300));
        }
        let settled = feedback.interval().as_secs_f64();
        assert!((0.29..=0.3).contains(&settled), "{settled}");
        let once_late = feedback
            .heard_after(Duration::from_secs(60))
            .interval()
            .as_secs_f64();
        assert!(once_late < 0.3 * 1.4, "{once_late}");
    }
}
