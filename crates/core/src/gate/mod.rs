//! The send gate: an adaptive limiter, per process and dependency, that
//! every attempt (first tries and retries) passes while the dependency is
//! unwell, so that a herd returns to a recovering dependency at the rate it
//! can take rather than all at once.
//!
//! - **Off while healthy.** Asking for a turn is one atomic load; outcomes
//!   that say nothing is wrong are ignored. The first outcome that says the
//!   dependency is overloaded or down turns the gate on.
//! - **On: paced turns, first come first served.** Turns are `1 / rate`
//!   apart (pacing, as BBR paces its delivery rate, rather than a token
//!   bucket's bursts). An attempt that cannot go at once takes a
//!   [`Ticket`] and waits in line; only the first in line waits for a time,
//!   the others wait to be woken, so a thousand waiters cost nothing while
//!   they wait and the line moves as soon as the rate grows. The caller
//!   bounds the wait by its deadline and [`leave`](SendGate::leave)s the
//!   line when it passes.
//! - **The rate is learned from outcomes.** Until something is accepted,
//!   the gate probes at `minRate`. Accepted attempts then grow the rate
//!   quickly (slow start: each adds `ramp` turns per second). An overload
//!   after that cuts it by `beta` and regrows it along CUBIC's curve
//!   towards, then past, the rate at which it failed. As in TCP, an overload
//!   cuts the rate once: attempts sent before the cut were sent at the old
//!   rate, and their failures do not cut it again. A timeout cuts to a share
//!   of the most the dependency accepted in a second of the last three
//!   instead: it may still be working on what timed out, and a rate it
//!   cannot keep up with is how a spike becomes a lasting collapse. After a
//!   timeout the rate also grows no faster than 1.25 times that most (BBR's
//!   gain when it probes for bandwidth), until a refusal shows the
//!   dependency answering at once: answers come late from a slow
//!   dependency, and a rate that grows ahead of them overshoots before the
//!   next timeout can say so. A refusal's cut never goes below
//!   what the dependency accepted over the last second (BBR's delivery
//!   rate): a server that takes 200 a second and refuses the rest of a
//!   second's burst has shown it can take 200, not that it can take none.
//!   The refusal that ends slow start cuts to that delivery rate, not by
//!   `beta`: slow start grows the rate ahead of the answers, and a share of
//!   a rate that far past the dependency's is still past it.
//! - **Off again** once nothing has been refused and nobody has had to wait
//!   for `quiet`.
//! - **Unless `overloadWhen: any-refusal`** (as shipped, `evidence`), for a
//!   dependency that fails a share of requests at random (which the above
//!   would pace down by that share, every second), a refusal says overload
//!   only once refusals outnumber acceptances over the last second by more
//!   than chance would (Google's client-side throttling, K = 2), or when
//!   enough have come with nothing accepted for three seconds (the
//!   dependency is down: on, and probing, as above; under `evidence` five
//!   in a row or three over a second, under `most-refused` three). Until
//!   then the gate watches: off, counting answers, and, if the dependency
//!   has accepted something within three seconds, telling the fleet's
//!   controller what it hears ([`asks_fleet_at`](SendGate::asks_fleet_at)):
//!   one process hears a couple of answers a second, too few to tell a
//!   brownout from failure at random; the fleet hears them all, and may
//!   tell it to pace ([`pace_by_fleet_at`](SendGate::pace_by_fleet_at)).
//!   Under `most-refused`, once something is accepted the rate is never
//!   below twice what was accepted over the last second, and a refusal cuts
//!   it only while refusals outnumber acceptances. Under `evidence` a gate
//!   that found its dependency down recovers as under `any-refusal`, but
//!   tries its cuts (the `trial` module), after twenty refusals in a row
//!   only once it has recovered for as long as it was down: refusals that
//!   keep their share over two cuts were a chance run, and from then on it
//!   judges as `most-refused` does.
//!
//! CUBIC's constants (`C = 0.4`, `β = 0.7`) and the lowest rate (0.5 per
//! second) are those of the AWS SDKs' adaptive retry mode (botocore
//! `retries/adaptive.py`, aws-sdk-go-v2 `adaptive_ratelimit.go`). Unlike
//! it, the gate paces a line instead of letting a bucket burst, and starts
//! from the lowest rate rather than a rate measured while healthy, so that
//! it costs nothing until the first failure.
//!
//! Decisions take the time as an argument (`_at`), so a simulator drives
//! the very code a client runs.

mod answers;
mod judgement;
mod pace;
pub(crate) mod rate;
pub(crate) mod trial;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::policy::{Criticality, GatePolicy, OverloadWhen, ValidPolicy};
use answers::Answers;
pub(crate) use answers::{beyond_random_by, BEYOND_CHANCE, OWN_CHANCE};
pub use judgement::{Judged, Judgement};
pub use pace::Lease;
use pace::Pacer;
use rate::Rate;
use trial::{Finding, Trials};

/// What an attempt learns when it asks for a turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// Send now.
    Now,
    /// Wait in line: [`claim_at`](SendGate::claim_at) with this ticket
    /// until it says go, or [`leave`](SendGate::leave).
    Queued(Ticket),
    /// At the present pace its turn would come after the time it may wait
    /// until: the call fails now instead (it is shed), taking no place.
    Shed,
}

/// Who asks for a turn: the call's class, and when its turn must come by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asker {
    /// Which calls go first: those of a more critical class wait ahead of
    /// it, those of a less critical one behind.
    pub class: Criticality,
    /// The latest its turn may come, if any: a call whose turn would come
    /// later, at the present pace, is shed.
    pub by: Option<Instant>,
}

/// A place in a gate's line. Used up by a granted claim or by leaving.
/// The line is in the order of its places: every class ahead of the less
/// critical ones, and within a class, first come first served.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(Place);

/// A ticket's class and number.
type Place = (Criticality, u64);

impl Ticket {
    /// A number unique within its gate, in the order tickets were taken.
    pub fn number(&self) -> u64 {
        self.0 .1
    }
}

/// What the holder of a ticket is told when it claims its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Send now; the ticket is used up.
    Go,
    /// First in line: claim again at this instant (sooner, if woken: the
    /// rate may grow meanwhile).
    At(Instant),
    /// Others are ahead: claim again when woken.
    Behind,
}

/// What an attempt's outcome says about the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Answered well (or failed in a way that says nothing about load).
    Accepted,
    /// Overloaded or down: 429, 503, a refused connection, or any failure
    /// the policy retries.
    Overloaded,
    /// No answer in time. Unlike a refusal, the dependency may still be
    /// working on it: the rate is cut to what it has lately been seen to
    /// accept, not by a share of what was sent.
    TimedOut,
}

/// The gate of one dependency in one process. Shared by every call to it.
#[derive(Debug)]
pub struct SendGate {
    /// Its settings: [`retune`](SendGate::retune) replaces them with a
    /// new version's that hears overload as they do.
    policy: ArcSwap<GatePolicy>,
    /// When refusals say overload: fixed for the gate's life (a change of
    /// it voids what the gate learned), and read on every healthy answer.
    overload_when: OverloadWhen,
    on: AtomicBool,
    /// Off, but a refusal has been heard under `most-refused`: outcomes are
    /// counted until they show overload (the gate turns on) or `quiet`
    /// passes without another refusal.
    watching: AtomicBool,
    /// Under `most-refused`, the tenth of a second (counted from `origin`,
    /// plus one; 0: never) of the last accepted attempt: whether the
    /// dependency was lately accepting. At most a store a tenth while
    /// healthy.
    last_accepted: AtomicU64,
    origin: Instant,
    state: Mutex<State>,
}

/// Under `most-refused`, how long (in tenths of a second) the dependency
/// must have accepted nothing for refusals to turn the gate on at once, as
/// for a dependency that is down: as long as the gate's counts go back.
const DOWN_AFTER_TENTHS: u64 = 30;

/// Under `most-refused`, the refusals within three seconds, with nothing
/// accepted, that show a dependency down. One would do for a gate that
/// has heard nothing else, but a process's first answers come from a
/// dependency that fails a share at random too: at a half, the first is
/// refused in one process of two, the first three in one of eight. A herd
/// of callers refused together counts three at once.
const DOWN_REFUSALS: f64 = 3.0;

/// Under `evidence`, the refusals in a row, with nothing accepted lately,
/// that show a dependency down at once: a herd's callers, refused together,
/// count five at once (a thousand callers through 200 processes are five a
/// process). A dependency failing a half at random refuses a process's
/// first five about once in 32 starts; the gate then probes, and the trials
/// of its cuts find the refusals random within a few dozen answers. Ten in
/// a row would mislead one start in a thousand, but cost the simulator's
/// herd through 200 processes a thousand more refused first tries.
const DOWN_RUN: u32 = 5;

/// Under `evidence`, how long [`DOWN_REFUSALS`] in a row, with nothing
/// accepted lately, must span to show a dependency down: a process that
/// sends a few attempts a second to a dependency failing up to a half at
/// random hears one accepted within a second, while a process with one
/// caller, whose retries back off, counts five only after seconds.
const DOWN_SPAN: std::time::Duration = std::time::Duration::from_secs(1);

/// Under `evidence`, the refusals in a row, with nothing accepted, past
/// which a gate that found its dependency down does not try its cuts while
/// it recovers (for as long again as the dependency was down): a half
/// failed at random gives twenty in a row once in a million runs, so the
/// dependency was down, and the refusals after its return are a
/// capacity's. A trial holds the rate at its cut until it has counted
/// twenty answers; at a limit that counts what it refuses (a request-rate
/// limit, HAProxy's as usually set) the hold keeps its window full, and the
/// herd through 50 processes took a second longer.
const OUTAGE_RUN: u32 = 20;

/// Later than any turn a wait bound can allow: twice the longest
/// `maxWait`, a day (an `Instant` cannot hold `Duration::MAX`).
const FOREVER: Duration = Duration::from_secs(2 * 86_400);

/// What a gate saw since it was last asked (see [`SendGate::tally`]): what
/// a process tells the fleet's coordinator.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    /// Turns given (attempts sent) while on.
    pub sent: u64,
    /// Attempts accepted while on.
    pub accepted: u64,
    /// Attempts refused or timed out while on.
    pub overloaded: u64,
    /// Of those, the ones that timed out.
    pub timed_out: u64,
    /// Attempts waiting in line now: the demand not yet served.
    pub waiting: u64,
    /// Whether the gate is off, watching (under `most-refused`): the counts
    /// are of what it heard since it began to, every attempt sent unpaced.
    pub watching: bool,
    /// By class, the calls the gate failed for want of a turn while on:
    /// shed at once (their turn too far off), or after waiting as long as
    /// they could. Demand the pace did not serve.
    pub shed: [u64; 3],
    /// By class (in [`Criticality::ALL`]'s order), the calls that asked for
    /// a turn while on plus those waiting now: what each class wants, in
    /// proportion, of what the fleet gives this process.
    pub demand: [f64; 3],
}

/// The gate's state while on.
#[derive(Debug)]
struct State {
    /// The rate learned from this process's own outcomes.
    rate: Rate,
    /// Turns as credit, at the lease's rate if the fleet granted one, else at `rate`.
    pacer: Pacer,
    /// The last overload, or when someone last had to wait: the gate turns
    /// off `quiet` after the later of the two.
    last_trouble: Instant,
    /// The line, first ticket first, with the waker of each waiter that has one.
    line: BTreeMap<Place, Option<Waker>>,
    next_ticket: u64,
    tally: Tally,
    /// By class, the calls that asked for a turn since the last tally.
    asked: [u64; 3],
    /// Draws each turn-on's first credit, so that processes that failed
    /// together do not probe together.
    rng: SmallRng,
    /// While watching, what the dependency answered since watching began.
    watch: Answers,
    /// While watching, the refusals since the last acceptance (or since
    /// watching began), and when the first of them came.
    refusal_run: Option<(u32, Instant)>,
    /// Once on for a dependency found down: the refusals in a row, with
    /// nothing accepted, that found it down and met the probes since.
    outage_run: u32,
    /// When the gate last turned on for a dependency found down.
    down_since: Instant,
    /// After an outage of [`OUTAGE_RUN`] refusals or more, until when its
    /// recovery is not tried for failure at random.
    untried_until: Option<Instant>,
    /// Under `evidence`, once on for a dependency found down: what the
    /// gate's cuts do to the refusals.
    trials: Trials,
}

/// What an outcome heard while off says.
enum Watched {
    /// Not overload yet: the gate stays off.
    NotYet,
    /// The dependency is down (nothing accepted lately) or slow (a
    /// timeout), or under `any-refusal` any refusal: on, probing.
    Down,
    /// Refusals have come to outnumber acceptances: on, judging the
    /// dependency to answer.
    Overloaded,
}

impl SendGate {
    /// The gate `policy` sets up, off. The policy is validated, so every
    /// rate is positive and finite.
    pub fn new_at(policy: &ValidPolicy, now: Instant) -> Self {
        Self::seeded_at(policy, now, rand::rng().random())
    }

    /// [`new_at`](Self::new_at) with the random source seeded, for a
    /// simulation that must run the same way twice.
    pub fn seeded_at(policy: &ValidPolicy, now: Instant, seed: u64) -> Self {
        let policy = policy.gate.clone();
        Self {
            state: Mutex::new(State {
                rate: Rate::probing(&policy, now),
                pacer: Pacer::new(0.0, now),
                last_trouble: now,
                line: BTreeMap::new(),
                next_ticket: 0,
                tally: Tally::default(),
                asked: [0; 3],
                rng: SmallRng::seed_from_u64(seed),
                watch: Answers::new(now),
                refusal_run: None,
                outage_run: 0,
                down_since: now,
                untried_until: None,
                trials: Trials::of_a_process(),
            }),
            on: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            last_accepted: AtomicU64::new(0),
            origin: now,
            overload_when: policy.overload_when,
            policy: ArcSwap::from_pointee(policy),
        }
    }

    /// Takes up `policy`, a new version of the gate's settings, keeping
    /// what the gate has learned (on or off, its rate, judgement, trials
    /// and line): its rates, CUBIC's constants and `quiet` shape what comes
    /// next, and the rate stays within the new bounds. Whether it did: a
    /// change that voids what it learned (see
    /// [`GatePolicy::unlearned_by`]) is refused, and needs a new gate.
    pub fn retune(&self, policy: &GatePolicy) -> bool {
        if self.policy.load().unlearned_by(policy).is_some() {
            return false;
        }
        let mut state = self.lock();
        state.rate.now = state.rate.now.clamp(policy.min_rate, policy.max_rate);
        if let Some(lease) = &mut state.pacer.lease {
            lease.rate = lease.rate.min(policy.max_rate);
        }
        self.policy.store(Arc::new(policy.clone()));
        // The first in line may be due sooner now.
        state.wake_first();
        true
    }

    /// The gate's settings.
    pub fn policy(&self) -> Arc<GatePolicy> {
        self.policy.load_full()
    }

    /// Whether a timed-out attempt says the dependency is overloaded or down.
    pub fn overloaded_by_timeouts(&self) -> bool {
        self.policy.load().overloaded_by_timeouts()
    }

    /// Whether the gate paces attempts now.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Whether the gate paces attempts at `now`: it turns off here if it has
    /// been quiet long enough and nobody waits, as it would at the next turn.
    pub fn is_on_at(&self, now: Instant) -> bool {
        if !self.is_on() {
            return false;
        }
        !self.turn_off_if_quiet(&self.lock(), now)
    }

    /// Turns the gate off if nothing has been refused and nobody has waited
    /// for `quiet`, and nobody waits now; whether it did.
    fn turn_off_if_quiet(&self, state: &State, now: Instant) -> bool {
        let quiet = now.saturating_duration_since(state.last_trouble) >= self.policy.load().quiet;
        let off = quiet && state.line.is_empty();
        if off {
            self.on.store(false, Ordering::Relaxed);
        }
        off
    }

    /// The rate the gate paced at as of its last turn or outcome, in
    /// attempts per second (the fleet's grant while one lasted, else its
    /// own); `None` while off. See [`rate_at`](Self::rate_at) for the rate
    /// at a given time.
    pub fn rate(&self) -> Option<f64> {
        self.is_on().then(|| {
            let state = self.lock();
            state.pacer.pace(state.rate.now)
        })
    }

    /// The rate the gate paces at `now`: the fleet's grant if its lease
    /// still runs, else its own; `None` while off.
    pub fn rate_at(&self, now: Instant) -> Option<f64> {
        self.is_on().then(|| {
            let state = self.lock();
            state.pacer.pace_at(state.rate.now, now)
        })
    }

    /// The rate learned from this process's own outcomes; `None` while off.
    pub fn own_rate(&self) -> Option<f64> {
        self.is_on().then(|| self.lock().rate.now)
    }

    /// Whether the gate is on judging the dependency to answer rather than
    /// to be overloaded (under `most-refused`, once something has been
    /// accepted): a refusal then cuts the rate only while refusals
    /// outnumber acceptances. False while off.
    pub fn is_answering(&self) -> bool {
        self.is_on() && self.lock().rate.is_answering()
    }

    /// Whether the gate is off but counting outcomes since a refusal.
    pub fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    /// Whether the process asks the fleet's controller for its share at
    /// `now`: its gate is on, or off and watching a dependency that has
    /// lately accepted something (the controller hears what it counts, and
    /// may tell it to pace). A gate that watches a dependency that has not
    /// waits to see it down, as it would without a fleet.
    pub fn asks_fleet_at(&self, now: Instant) -> bool {
        self.is_on_at(now) || (self.is_watching() && self.accepted_lately(now))
    }

    /// Paces at `rate` until `until` instead of the gate's own rate: the
    /// fleet's grant. Ignored while the gate is off, or if `rate` is not a
    /// positive number; at most the policy's `maxRate`.
    pub fn lease_at(&self, rate: f64, until: Instant, now: Instant) {
        let usable = self.is_on() && rate > 0.0 && rate.is_finite() && until > now;
        if !usable {
            return;
        }
        let mut state = self.lock();
        let own = state.rate.now;
        state.pacer.accrue(own, now);
        state.pacer.lease = Some(Lease {
            rate: rate.min(self.policy.load().max_rate),
            until,
            since: now,
            cut: false,
        });
        state.wake_first();
    }

    /// Where the gate's own rate is in its law: `off`, or while on
    /// `probing`, `slow_start`, `cubic` (after a cut, below the rate it was
    /// cut at) or `regrown` (back at or past it). The clients' shared
    /// vectors check each language's gate against it.
    pub fn phase(&self) -> &'static str {
        if self.is_on() {
            self.lock().rate.phase_name()
        } else {
            "off"
        }
    }

    /// Turns' credit as of the gate's last accrual: what the clients'
    /// shared vectors check each language's pacer against.
    pub fn credit(&self) -> f64 {
        self.lock().pacer.credit()
    }

    /// What the gate saw since the last tally, and who waits now.
    pub fn tally(&self) -> Tally {
        let mut state = self.lock();
        let waiting = state.line.len() as u64;
        let mut demand = std::mem::take(&mut state.asked).map(|asked| asked as f64);
        for &(class, _) in state.line.keys() {
            demand[class.rank()] += 1.0;
        }
        Tally {
            waiting,
            watching: self.is_watching(),
            demand,
            ..std::mem::take(&mut state.tally)
        }
    }

    /// Attempts waiting in line.
    pub fn waiting(&self) -> usize {
        self.lock().line.len()
    }

    /// The first in line and when its turn is due, if anyone waits: a
    /// simulator schedules that ticket's claim then.
    pub fn first_in_line(&self) -> Option<(u64, Instant)> {
        let state = self.lock();
        let (&(_, number), _) = state.line.first_key_value()?;
        Some((number, state.pacer.due(state.rate.now)))
    }

    /// A turn for an attempt of a call of the default class, with no time
    /// its turn must come by, asking at `now`.
    #[inline]
    pub fn turn_at(&self, now: Instant) -> Turn {
        self.turn_for_at(Asker::default(), now)
    }

    /// A turn for an attempt of `asker`'s call, asking at `now`: it waits
    /// behind the calls of its class and more critical ones that wait, and
    /// is shed if its turn would come after `asker.by`.
    #[inline]
    pub fn turn_for_at(&self, asker: Asker, now: Instant) -> Turn {
        if !self.is_on() {
            return Turn::Now;
        }
        self.paced_turn(now, None, asker)
    }

    /// [`turn_for_at`](Self::turn_for_at) for a call that has waited in
    /// line before, under the ticket numbered `place`: it waits at that
    /// place again, ahead of calls of its class that came after it. The
    /// line is first come, first served by call, not by attempt, so a retry
    /// (after a refused probe, say) does not go to the back of a line it
    /// has waited in longest.
    pub fn rejoin_at(&self, place: u64, asker: Asker, now: Instant) -> Turn {
        if !self.is_on() {
            return Turn::Now;
        }
        self.paced_turn(now, Some(place), asker)
    }

    fn paced_turn(&self, now: Instant, place: Option<u64>, asker: Asker) -> Turn {
        let mut state = self.lock();
        let class = asker.class;
        if place.is_none() {
            state.asked[class.rank()] += 1;
        }
        // Those it would wait behind: ahead of its place, or of its class's end.
        let before = place.map_or((class, u64::MAX), |number| (class, number));
        let ahead = state.line.range(..before).next().is_some();
        if self.turn_off_if_quiet(&state, now) || (!ahead && state.give_turn(now)) {
            return Turn::Now;
        }
        state.last_trouble = now;
        if asker.by.is_some_and(|by| state.turn_expected(before, now) > by) {
            state.tally.shed[class.rank()] += 1;
            return Turn::Shed;
        }
        let number = place.unwrap_or_else(|| {
            state.next_ticket += 1;
            state.next_ticket - 1
        });
        state.line.insert((class, number), None);
        Turn::Queued(Ticket((class, number)))
    }

    /// The holder of `ticket` asks for its turn at `now`; `waker`, if given,
    /// is woken when the answer may have changed (the line moved, or the
    /// rate grew).
    pub fn claim_at(&self, ticket: &Ticket, now: Instant, waker: Option<&Waker>) -> Claim {
        let mut state = self.lock();
        let first = state.line.first_key_value().map(|(&place, _)| place);
        if first == Some(ticket.0) && state.give_turn(now) {
            state.line.remove(&ticket.0);
            state.last_trouble = now;
            state.wake_first();
            return Claim::Go;
        }
        if let Some(slot) = state.line.get_mut(&ticket.0) {
            *slot = waker.cloned();
        }
        match first {
            Some(place) if place == ticket.0 => Claim::At(state.pacer.due(state.rate.now)),
            _ => Claim::Behind,
        }
    }

    /// The holder of `ticket` waited in line until it could wait no longer
    /// (its class's `maxWait`, or its deadline) and gives up its place: a
    /// call shed, for the tally, as one shed at once is.
    pub fn give_up(&self, ticket: Ticket) {
        let class = ticket.0 .0;
        self.leave(ticket);
        self.lock().tally.shed[class.rank()] += 1;
    }

    /// The holder of `ticket` gives up its place (its deadline passed, or
    /// it was cancelled).
    pub fn leave(&self, ticket: Ticket) {
        let mut state = self.lock();
        let was_first = state.line.first_key_value().map(|(&place, _)| place) == Some(ticket.0);
        state.line.remove(&ticket.0);
        if was_first {
            state.wake_first();
        }
    }

    /// Learns from the outcome, at `now`, of an attempt sent at `sent`.
    #[inline]
    pub fn record_at(&self, signal: Signal, sent: Instant, now: Instant) {
        if signal == Signal::Accepted {
            let weighs = self.overload_when.weighs_refusals();
            if weighs {
                self.note_accepted(now);
            }
            // Under any-refusal nothing watches: a healthy call loads `on` alone.
            let counted = self.is_on() || (weighs && self.is_watching());
            if !counted {
                return;
            }
        }
        self.learn(signal, sent, now);
    }

    /// Notes that something was accepted at `now`: a store at most once a
    /// tenth of a second.
    #[inline]
    fn note_accepted(&self, now: Instant) {
        let tenth = self.tenth(now) + 1;
        if self.last_accepted.load(Ordering::Relaxed) != tenth {
            self.last_accepted.store(tenth, Ordering::Relaxed);
        }
    }

    fn tenth(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.origin).as_millis() / 100) as u64
    }

    /// Whether anything was accepted within [`DOWN_AFTER_TENTHS`] of `now`.
    fn accepted_lately(&self, now: Instant) -> bool {
        match self.last_accepted.load(Ordering::Relaxed) {
            0 => false,
            last => (self.tenth(now) + 1).saturating_sub(last) < DOWN_AFTER_TENTHS,
        }
    }

    fn learn(&self, signal: Signal, sent: Instant, now: Instant) {
        let mut state = self.lock();
        if !self.is_on() {
            match self.watched(&mut state, signal, now) {
                Some(Watched::NotYet) | None => {}
                Some(Watched::Down) => self.turn_on(&mut state, signal, sent, now),
                Some(Watched::Overloaded) => {
                    state.rate = Rate::answering(&self.policy.load(), state.watch, now);
                    self.start_pacing(&mut state, signal, now);
                }
            }
            return;
        }
        let policy = &*self.policy.load();
        match signal {
            Signal::Overloaded | Signal::TimedOut => {
                let timed_out = signal == Signal::TimedOut;
                state.tally.overloaded += 1;
                state.tally.timed_out += u64::from(timed_out);
                if !timed_out {
                    if state.rate.is_probing() {
                        state.outage_run = state.outage_run.saturating_add(1);
                    }
                    state.rate.refused(1, now);
                    if self.trial_holds(&mut state, 0.0, 1.0, sent, now) {
                        return;
                    }
                }
                let own = state.rate.now;
                state.pacer.accrue(own, now);
                let last_cut = state.rate.last_cut();
                if state.rate.overloaded(policy, sent, now, timed_out) {
                    state.last_trouble = now;
                    state.pacer.overloaded(policy.beta, sent);
                }
                if self.tries_cuts(&state, now) && !timed_out && state.rate.last_cut() > last_cut {
                    let share = state.rate.refused_share_last_second(now);
                    state.trials.cut(share, now);
                }
            }
            Signal::Accepted => {
                if state.rate.is_probing() && state.outage_run >= OUTAGE_RUN {
                    let down_for = now.saturating_duration_since(state.down_since);
                    state.untried_until = Some(now + down_for);
                }
                self.trial_holds(&mut state, 1.0, 0.0, sent, now);
                state.tally.accepted += 1;
                let own = state.rate.now;
                state.pacer.accrue(own, now);
                state.rate.accepted(policy, now);
                self.turn_off_if_quiet(&state, now);
                // The first in line may be due sooner now.
                state.wake_first();
            }
        }
    }

    /// Counts an outcome heard while off (a refusal, or anything while
    /// watching), and says what a refusal shows. A timeout turns the gate
    /// on at once, and so does any refusal unless the policy says
    /// `most-refused`. Then a refusal starts watching, and turns the gate on
    /// probing once [`DOWN_REFUSALS`] have come with nothing accepted
    /// lately; while watching, outcomes are counted until they show
    /// overload, and watching ends after `quiet` without a refusal.
    fn watched(&self, state: &mut State, signal: Signal, now: Instant) -> Option<Watched> {
        if !self.overload_when.weighs_refusals() && signal != Signal::Accepted {
            return Some(Watched::Down);
        }
        match signal {
            Signal::Accepted => {
                state.refusal_run = None;
                state.watch.accepted(1, now);
                state.tally.sent += 1;
                state.tally.accepted += 1;
                if now.saturating_duration_since(state.last_trouble) >= self.policy.load().quiet {
                    self.watching.store(false, Ordering::Relaxed);
                }
                None
            }
            Signal::TimedOut => Some(Watched::Down),
            Signal::Overloaded => {
                if self.is_watching() {
                    state.tally.sent += 1;
                    state.tally.overloaded += 1;
                } else {
                    // The refusal that begins watching is left out of what
                    // the fleet hears: every process would report one, and
                    // none of the acceptances before it.
                    state.watch = Answers::new(now);
                    state.refusal_run = None;
                    state.tally = Tally::default();
                    self.watching.store(true, Ordering::Relaxed);
                }
                state.watch.refused(1, now);
                state.last_trouble = now;
                let (run, since) = state.refusal_run.unwrap_or((0, now));
                state.refusal_run = Some((run + 1, since));
                let down =
                    !self.accepted_lately(now) && !state.watch.any_accepted() && self.shows_down(state, now);
                Some(if down {
                    Watched::Down
                } else if state.watch.shows_overload() {
                    Watched::Overloaded
                } else {
                    Watched::NotYet
                })
            }
        }
    }

    /// Whether the gate tries its cuts at `now`: under `evidence`, on for a
    /// dependency it found down that has since accepted something, until
    /// a trial finds it failing a share at random, or the gate is slow;
    /// not while it recovers from an outage no chance explains
    /// ([`OUTAGE_RUN`]).
    fn tries_cuts(&self, state: &State, now: Instant) -> bool {
        self.overload_when == OverloadWhen::Evidence
            && state.untried_until.is_none_or(|until| now >= until)
            && !state.rate.is_probing()
            && !state.rate.is_answering()
            && !state.rate.is_slow()
    }

    /// Hears, at `now`, `accepted` and `refused` answers to an attempt sent
    /// at `sent` in the trial of the gate's last cut, if it tries its cuts;
    /// whether the trial holds the rate (a refusal then cuts nothing). A
    /// trial whose refusals kept their share over two cuts judges the
    /// dependency to answer, failing a share at random: refusals from then
    /// on cut only while most are refused, as under `most-refused`.
    fn trial_holds(
        &self,
        state: &mut State,
        accepted: f64,
        refused: f64,
        sent: Instant,
        now: Instant,
    ) -> bool {
        if !self.tries_cuts(state, now) {
            return false;
        }
        if let Some(Finding::Random(_)) = state.trials.answered(accepted, refused, sent) {
            state.rate.answering_verdict(&self.policy.load(), now);
            state.trials.reset();
            return false;
        }
        state.trials.holds()
    }

    /// Whether the refusals heard while watching, with nothing accepted
    /// lately, show the dependency down: under `most-refused`, three within
    /// three seconds; under `evidence`, [`DOWN_RUN`] in a row, or
    /// [`DOWN_REFUSALS`] in a row over [`DOWN_SPAN`].
    fn shows_down(&self, state: &State, now: Instant) -> bool {
        match self.overload_when {
            OverloadWhen::MostRefused => state.watch.refusals() >= DOWN_REFUSALS,
            _ => state.refusal_run.is_some_and(|(run, since)| {
                run >= DOWN_RUN
                    || (f64::from(run) >= DOWN_REFUSALS && now.saturating_duration_since(since) >= DOWN_SPAN)
            }),
        }
    }

    /// While watching, turns the gate on at `now` because the fleet's
    /// controller, hearing every process, holds the fleet back (the grant
    /// says `pace`); whether it did. Its grant then paces it, and its own
    /// rate, should grants stop, is that of a dependency judged to answer
    /// (or, if nothing was accepted lately, to be down).
    pub fn pace_by_fleet_at(&self, now: Instant) -> bool {
        let mut state = self.lock();
        if self.is_on() || !self.is_watching() {
            return false;
        }
        if self.accepted_lately(now) {
            state.rate = Rate::answering(&self.policy.load(), state.watch, now);
            self.start_pacing(&mut state, Signal::Overloaded, now);
        } else {
            self.turn_on(&mut state, Signal::Overloaded, now, now);
        }
        // The fleet heard what it counted while watching.
        state.tally = Tally::default();
        true
    }

    /// The fleet's breaker closed at `now`, and the daemon takes the fleet
    /// back at its pace: the gate turns on if it is off, as for a
    /// dependency that has accepted nothing yet (it went quiet while the
    /// breaker refused every call), so that the fleet's grant, not every
    /// process at once, sets what is sent. Whether it turned on.
    pub fn resume_by_fleet_at(&self, now: Instant) -> bool {
        if self.is_watching() {
            return self.pace_by_fleet_at(now);
        }
        let mut state = self.lock();
        if self.is_on() {
            return false;
        }
        self.turn_on(&mut state, Signal::Overloaded, now, now);
        state.tally = Tally::default();
        true
    }

    /// Turns the gate on at `now` for a dependency that accepts nothing:
    /// it probes at the lowest rate.
    fn turn_on(&self, state: &mut State, signal: Signal, sent: Instant, now: Instant) {
        let policy = self.policy.load();
        state.rate = Rate::probing(&policy, now);
        state.trials.reset();
        state.outage_run = state.refusal_run.take().map_or(1, |(run, _)| run);
        state.down_since = now;
        state.untried_until = None;
        // The rate is at its lowest already; this only notes whether the
        // dependency is slow.
        let timed_out = signal == Signal::TimedOut;
        state.rate.overloaded(&policy, sent, now, timed_out);
        self.start_pacing(state, signal, now);
    }

    /// Starts pacing at `now`, at the rate set, after `signal`.
    fn start_pacing(&self, state: &mut State, signal: Signal, now: Instant) {
        let first_credit = state.rng.random::<f64>();
        state.pacer = Pacer::new(first_credit, now);
        state.last_trouble = now;
        // The failure that turned it on is the first the daemon hears of.
        let timed_out = signal == Signal::TimedOut;
        state.tally = Tally {
            overloaded: 1,
            timed_out: u64::from(timed_out),
            ..Tally::default()
        };
        self.watching.store(false, Ordering::Relaxed);
        self.on.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Gives a turn if one has accrued by `now`.
    fn give_turn(&mut self, now: Instant) -> bool {
        let own = self.rate.now;
        self.pacer.accrue(own, now);
        let given = self.pacer.take();
        self.tally.sent += u64::from(given);
        given
    }

    /// When the turn of a call waiting behind those whose places are
    /// before `before` would come, at the present pace: the first in line's
    /// turn is due when its credit accrues, each after it one pace later.
    /// While the gate probes a dependency that has accepted nothing, its
    /// pace is a probe's, not what the dependency will take once back (the
    /// line then moves at once): the call's turn is expected no sooner
    /// than the next probe, whoever is ahead. A fleet's grant to a process
    /// that probes is its part of the fleet's probes, as much a probe's: a
    /// herd whose calls may wait a minute lost a tenth of them, shed,
    /// when those ahead counted at it.
    fn turn_expected(&mut self, before: Place, now: Instant) -> Instant {
        let own = self.rate.now;
        self.pacer.accrue(own, now);
        let ahead = match self.rate.is_probing() {
            true => 0,
            false => self.line.range(..before).count(),
        };
        let pace = self.pacer.pace(own);
        let after_first = Duration::try_from_secs_f64(ahead as f64 / pace).unwrap_or(Duration::MAX);
        self.pacer
            .due(own)
            .checked_add(after_first)
            .unwrap_or(now + FOREVER)
    }

    fn wake_first(&mut self) {
        if let Some(waker) = self.line.values_mut().next().and_then(Option::take) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests;
