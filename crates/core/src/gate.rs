//! The send gate: an adaptive limiter, per process and dependency, that
//! every attempt (first tries and retries) passes while the dependency is
//! unwell, so that a herd returns to a recovering dependency at the rate it
//! can take rather than all at once.
//!
//! - **Off while healthy.** Asking for a turn is one atomic load; outcomes
//!   that say nothing is wrong are ignored. The first outcome that says the
//!   dependency is overloaded or down turns the gate on.
//! - **On: paced turns.** Attempts are given turns `1 / rate` apart, in the
//!   order they ask (pacing, as BBR paces its delivery rate, rather than a
//!   token bucket's bursts). An attempt waits for its turn instead of
//!   failing; one whose turn would come after its deadline is told so at
//!   once ([`Turn::NotInTime`]) and takes no turn.
//! - **The rate is learned from outcomes.** While no answer has been good
//!   since the gate turned on, each overload cuts the rate by `beta` down to
//!   `min_rate`: during a full outage the gate probes at that low rate. Good
//!   answers then grow it quickly (slow start: every accepted attempt adds
//!   `ramp` turns per second, so the rate doubles about every `1 / ramp`
//!   seconds while everything is accepted). An overload after that cuts it
//!   by `beta` and regrows it along CUBIC's curve towards, then past, the
//!   rate at which it failed.
//! - **Off again** once nothing has been refused and nobody has had to wait
//!   for `quiet`.
//!
//! CUBIC's constants (`C = 0.4`, `β = 0.7`) and the lowest rate (0.5 per
//! second) are those of the AWS SDKs' adaptive retry mode (botocore
//! `retries/adaptive.py`, aws-sdk-go-v2 `adaptive_ratelimit.go`). Unlike it,
//! the gate paces instead of bursting from a bucket, and starts slow-start
//! from the lowest rate rather than from a rate measured while healthy, so
//! that it costs nothing until the first failure.
//!
//! Decisions take the time as an argument (`_at`), so a simulator drives
//! the very code a client runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How a gate learns and paces; [`GateSettings::default`] holds the
/// constants above. Only [`SendGate::new_at`] uses it, after [`check`](Self::check).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateSettings {
    /// The lowest rate, in attempts per second: the probe rate during a full
    /// outage. More than 0, at most `max_rate`. Default 0.5 (the AWS SDKs').
    pub min_rate: f64,
    /// The highest rate the gate paces at, in attempts per second. Default 100,000.
    pub max_rate: f64,
    /// The share of the rate kept after an overload, in (0, 1). Default 0.7 (CUBIC's β).
    pub beta: f64,
    /// CUBIC's scale: how fast the rate regrows after an overload, more
    /// than 0. Default 0.4 (CUBIC's C).
    pub scale: f64,
    /// Slow start: turns per second added by each accepted attempt, more
    /// than 0. Default 1 (the rate doubles about every second).
    pub ramp: f64,
    /// Time without refusals and without waiting after which the gate turns
    /// off; more than 0. Default 5 s.
    pub quiet: Duration,
}

impl Default for GateSettings {
    fn default() -> Self {
        Self {
            min_rate: 0.5,
            max_rate: 100_000.0,
            beta: 0.7,
            scale: 0.4,
            ramp: 1.0,
            quiet: Duration::from_secs(5),
        }
    }
}

/// A setting of [`GateSettings`] out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("gate.{key} = {value}: {expected}")]
pub struct InvalidGate {
    /// The setting.
    pub key: &'static str,
    /// Its value, as given.
    pub value: String,
    /// The range it must be in.
    pub expected: &'static str,
}

impl GateSettings {
    /// Whether every setting is in its range (NaN never is).
    pub fn check(&self) -> Result<(), InvalidGate> {
        let invalid = |key, value: f64, expected| InvalidGate {
            key,
            value: value.to_string(),
            expected,
        };
        let positive = |value: f64| value > 0.0 && value.is_finite();
        if !positive(self.min_rate) {
            return Err(invalid("minRate", self.min_rate, "more than 0 per second"));
        }
        if !(positive(self.max_rate) && self.max_rate >= self.min_rate) {
            return Err(invalid("maxRate", self.max_rate, "at least minRate"));
        }
        if !(self.beta > 0.0 && self.beta < 1.0) {
            return Err(invalid("beta", self.beta, "between 0 and 1, both excluded"));
        }
        if !positive(self.scale) {
            return Err(invalid("scale", self.scale, "more than 0"));
        }
        if !positive(self.ramp) {
            return Err(invalid("ramp", self.ramp, "more than 0"));
        }
        if self.quiet.is_zero() {
            return Err(invalid("quiet", 0.0, "more than 0 s"));
        }
        Ok(())
    }
}

/// What an attempt learns when it asks for a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Send now.
    Now,
    /// Send at this instant (wait until then).
    At(Instant),
    /// The turn would come after the attempt's deadline: no turn was taken.
    NotInTime,
}

/// What an attempt's outcome says about the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Answered well (or failed in a way that says nothing about load).
    Accepted,
    /// Overloaded or down: 429, 503, a timeout, a refused connection, or any
    /// failure the policy retries.
    Overloaded,
}

/// The gate of one dependency in one process. Shared by every call to it.
#[derive(Debug)]
pub struct SendGate {
    settings: GateSettings,
    on: AtomicBool,
    pacer: Mutex<Pacer>,
}

/// The gate's state while on.
#[derive(Debug, Clone, Copy)]
struct Pacer {
    /// Turns per second now.
    rate: f64,
    /// The next free turn.
    next: Instant,
    /// Slow start (no overload since the first good answer) or CUBIC.
    phase: Phase,
    /// The last overload, or when the gate last had to make someone wait:
    /// the gate turns off `quiet` after the later of the two.
    last_trouble: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// No good answer yet since the gate turned on: overloads cut the rate.
    Probing,
    /// Good answers grow the rate by `ramp` each.
    SlowStart,
    /// After an overload at rate `max` at `since`: the rate follows
    /// `scale × (t − k)³ + max`.
    Cubic { max: f64, since: Instant, k: f64 },
}

impl SendGate {
    /// A gate, off, with `settings` (checked: see [`GateSettings::check`]).
    pub fn new_at(settings: GateSettings, now: Instant) -> Result<Self, InvalidGate> {
        settings.check()?;
        Ok(Self {
            settings,
            on: AtomicBool::new(false),
            pacer: Mutex::new(Pacer {
                rate: settings.min_rate,
                next: now,
                phase: Phase::Probing,
                last_trouble: now,
            }),
        })
    }

    /// Whether the gate paces attempts now.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The rate the gate paces at, in attempts per second; `None` while off.
    pub fn rate(&self) -> Option<f64> {
        self.is_on().then(|| self.lock().rate)
    }

    /// A turn for an attempt asking at `now` that must be sent by `deadline`.
    #[inline]
    pub fn turn_at(&self, now: Instant, deadline: Option<Instant>) -> Turn {
        if !self.is_on() {
            return Turn::Now;
        }
        self.paced_turn(now, deadline)
    }

    fn paced_turn(&self, now: Instant, deadline: Option<Instant>) -> Turn {
        let mut pacer = self.lock();
        let turn = pacer.next.max(now);
        if deadline.is_some_and(|deadline| turn > deadline) {
            return Turn::NotInTime;
        }
        pacer.next = turn + Duration::from_secs_f64(1.0 / pacer.rate);
        if turn > now {
            pacer.last_trouble = now;
            Turn::At(turn)
        } else {
            Turn::Now
        }
    }

    /// Learns from an attempt's outcome at `now`.
    #[inline]
    pub fn record_at(&self, signal: Signal, now: Instant) {
        if signal == Signal::Accepted && !self.is_on() {
            return;
        }
        self.learn(signal, now);
    }

    fn learn(&self, signal: Signal, now: Instant) {
        let mut pacer = self.lock();
        let settings = &self.settings;
        match signal {
            Signal::Overloaded if !self.is_on() => {
                *pacer = Pacer {
                    rate: settings.min_rate,
                    next: now,
                    phase: Phase::Probing,
                    last_trouble: now,
                };
                self.on.store(true, Ordering::Relaxed);
            }
            Signal::Overloaded => pacer.overloaded(settings, now),
            Signal::Accepted => {
                pacer.accepted(settings, now);
                if now.saturating_duration_since(pacer.last_trouble) >= settings.quiet {
                    self.on.store(false, Ordering::Relaxed);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pacer> {
        self.pacer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Pacer {
    fn overloaded(&mut self, settings: &GateSettings, now: Instant) {
        self.last_trouble = now;
        let cut = (self.rate * settings.beta).max(settings.min_rate);
        if self.phase != Phase::Probing {
            // CUBIC: back to `max` after k seconds, k = ∛(max (1 − β) / C).
            let max = self.rate;
            let k = (max * (1.0 - settings.beta) / settings.scale).cbrt();
            self.phase = Phase::Cubic { max, since: now, k };
        }
        self.rate = cut;
    }

    fn accepted(&mut self, settings: &GateSettings, now: Instant) {
        let grown = match self.phase {
            Phase::Probing => {
                self.phase = Phase::SlowStart;
                self.rate + settings.ramp
            }
            Phase::SlowStart => self.rate + settings.ramp,
            Phase::Cubic { max, since, k } => {
                let t = now.saturating_duration_since(since).as_secs_f64();
                self.rate.max(settings.scale * (t - k).powi(3) + max)
            }
        };
        self.rate = grown.clamp(settings.min_rate, settings.max_rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(now: Instant) -> SendGate {
        SendGate::new_at(GateSettings::default(), now).unwrap()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn off_it_gives_every_turn_at_once_and_ignores_good_answers() {
        let t0 = Instant::now();
        let gate = gate(t0);
        for _ in 0..1000 {
            assert_eq!(gate.turn_at(t0, Some(t0)), Turn::Now);
            gate.record_at(Signal::Accepted, t0);
        }
        assert!(!gate.is_on());
        assert_eq!(gate.rate(), None);
    }

    #[test]
    fn the_first_overload_turns_it_on_at_the_probe_rate_with_turns_spaced_evenly() {
        let t0 = Instant::now();
        let gate = gate(t0);
        gate.record_at(Signal::Overloaded, t0);
        assert_eq!(gate.rate(), Some(0.5));
        assert_eq!(gate.turn_at(t0, None), Turn::Now);
        assert_eq!(gate.turn_at(t0, None), Turn::At(t0 + secs(2.0)));
        assert_eq!(gate.turn_at(t0, None), Turn::At(t0 + secs(4.0)));
    }

    #[test]
    fn a_turn_after_the_deadline_is_refused_and_not_taken() {
        let t0 = Instant::now();
        let gate = gate(t0);
        gate.record_at(Signal::Overloaded, t0);
        assert_eq!(gate.turn_at(t0, None), Turn::Now);
        assert_eq!(gate.turn_at(t0, Some(t0 + secs(1.0))), Turn::NotInTime);
        assert_eq!(gate.turn_at(t0, Some(t0 + secs(2.0))), Turn::At(t0 + secs(2.0)));
    }

    #[test]
    fn during_an_outage_it_stays_at_the_probe_rate() {
        let t0 = Instant::now();
        let gate = gate(t0);
        for i in 0..20 {
            gate.record_at(Signal::Overloaded, t0 + secs(f64::from(i)));
        }
        assert_eq!(gate.rate(), Some(0.5));
    }

    #[test]
    fn good_answers_ramp_it_up_and_an_overload_cuts_it_by_beta_then_cubic_regrows_it() {
        let t0 = Instant::now();
        let settings = GateSettings {
            quiet: Duration::from_secs(60),
            ..GateSettings::default()
        };
        let gate = SendGate::new_at(settings, t0).unwrap();
        gate.record_at(Signal::Overloaded, t0);
        for _ in 0..100 {
            gate.record_at(Signal::Accepted, t0 + secs(1.0));
        }
        assert_eq!(
            gate.rate(),
            Some(100.5),
            "slow start: one turn per second per good answer"
        );
        let failed_at = t0 + secs(1.0);
        gate.record_at(Signal::Overloaded, failed_at);
        let cut = gate.rate().unwrap();
        assert!((cut - 100.5 * 0.7).abs() < 1e-9, "{cut}");
        // Back to the rate it failed at after k = ∛(100.5 × 0.3 / 0.4) ≈ 4.22 s.
        let k = (100.5_f64 * 0.3 / 0.4).cbrt();
        gate.record_at(Signal::Accepted, failed_at + secs(k / 2.0));
        let half_way = gate.rate().unwrap();
        assert!(cut < half_way && half_way < 100.5, "{half_way}");
        gate.record_at(Signal::Accepted, failed_at + secs(k));
        assert!((gate.rate().unwrap() - 100.5).abs() < 1e-6);
        gate.record_at(Signal::Accepted, failed_at + secs(k + 2.0));
        assert!(gate.rate().unwrap() > 100.5, "CUBIC probes past the old maximum");
    }

    #[test]
    fn it_turns_off_after_a_quiet_time_without_refusals_or_waiting() {
        let t0 = Instant::now();
        let gate = gate(t0);
        gate.record_at(Signal::Overloaded, t0);
        gate.record_at(Signal::Accepted, t0 + secs(4.9));
        assert!(gate.is_on());
        // Waiting counts as trouble: a gate that still paces is still needed.
        assert_eq!(gate.turn_at(t0 + secs(4.9), None), Turn::Now);
        assert!(matches!(gate.turn_at(t0 + secs(4.9), None), Turn::At(_)));
        gate.record_at(Signal::Accepted, t0 + secs(9.8));
        assert!(gate.is_on());
        gate.record_at(Signal::Accepted, t0 + secs(9.9));
        assert!(!gate.is_on());
        assert_eq!(gate.turn_at(t0 + secs(9.9), None), Turn::Now);
    }

    #[test]
    fn the_rate_never_passes_its_bounds() {
        let t0 = Instant::now();
        let settings = GateSettings {
            max_rate: 50.0,
            ..GateSettings::default()
        };
        let gate = SendGate::new_at(settings, t0).unwrap();
        gate.record_at(Signal::Overloaded, t0);
        for _ in 0..1000 {
            gate.record_at(Signal::Accepted, t0);
        }
        assert_eq!(gate.rate(), Some(50.0));
        for _ in 0..1000 {
            gate.record_at(Signal::Overloaded, t0);
        }
        assert_eq!(gate.rate(), Some(0.5));
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let bad = |settings: GateSettings| SendGate::new_at(settings, Instant::now()).unwrap_err().key;
        let base = GateSettings::default();
        assert_eq!(
            bad(GateSettings {
                min_rate: 0.0,
                ..base
            }),
            "minRate"
        );
        assert_eq!(
            bad(GateSettings {
                min_rate: f64::NAN,
                ..base
            }),
            "minRate"
        );
        assert_eq!(
            bad(GateSettings {
                max_rate: 0.1,
                ..base
            }),
            "maxRate"
        );
        assert_eq!(bad(GateSettings { beta: 1.0, ..base }), "beta");
        assert_eq!(bad(GateSettings { scale: -1.0, ..base }), "scale");
        assert_eq!(
            bad(GateSettings {
                ramp: f64::INFINITY,
                ..base
            }),
            "ramp"
        );
        assert_eq!(
            bad(GateSettings {
                quiet: Duration::ZERO,
                ..base
            }),
            "quiet"
        );
        let message = SendGate::new_at(GateSettings { beta: 2.0, ..base }, Instant::now())
            .unwrap_err()
            .to_string();
        assert_eq!(message, "gate.beta = 2: between 0 and 1, both excluded");
    }
}
