//! The send gate's shared vectors: gates under several policies fed the
//! same turns, claims, departures, outcomes, leases and tallies at the same
//! nanoseconds, with every verdict and the gate's state after every step,
//! for the Go and Python clients to replay exactly.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use stormguard_core::gate::{Claim, SendGate, Signal, Ticket, Turn};
use stormguard_core::policy::{GatePolicy, OverloadWhen, RetryPolicy, ValidPolicy};
use tokio::time::Instant;

pub const PATH: &str = "clients/vectors/gate.json";

/// What the dependency does from a time on.
#[derive(Clone, Copy)]
enum Health {
    /// Accepts everything.
    Up,
    /// Refuses everything.
    Down,
    /// Accepts this many a calendar second, refuses the rest.
    Capacity(u32),
    /// Answers nothing in time.
    Slow,
    /// Refuses this share of attempts at random, whatever the rate.
    Random(f64),
    /// Accepts this many a calendar second, and of those refuses the
    /// share at random.
    CapacityAndRandom(u32, f64),
}

/// A scenario: the gate's settings and the dependency's health from each
/// millisecond on.
struct Shape {
    min_rate: f64,
    max_rate: f64,
    beta: f64,
    scale: f64,
    ramp: f64,
    quiet_ms: u64,
    health: &'static [(u64, Health)],
    /// Milliseconds between an attempt and its answer: from, to.
    latency: (u64, u64),
    overload_when: OverloadWhen,
}

const SHAPES: [Shape; 11] = [
    // The default gate: an outage, a recovery at 40 a second, healthy again.
    Shape {
        min_rate: 0.5,
        max_rate: 10_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 1_000,
        health: &[
            (0, Health::Up),
            (300, Health::Down),
            (3_000, Health::Capacity(40)),
            (11_000, Health::Up),
        ],
        latency: (2, 20),
        overload_when: OverloadWhen::AnyRefusal,
    },
    // A quick ramp against a low capacity: cuts and regrowth, twice.
    Shape {
        min_rate: 2.0,
        max_rate: 500.0,
        beta: 0.5,
        scale: 2.0,
        ramp: 20.0,
        quiet_ms: 400,
        health: &[
            (0, Health::Down),
            (1_000, Health::Capacity(15)),
            (7_000, Health::Up),
            (9_000, Health::Down),
            (10_000, Health::Capacity(25)),
            (14_000, Health::Up),
        ],
        latency: (1, 10),
        overload_when: OverloadWhen::AnyRefusal,
    },
    // A slow dependency: timeouts, then refusals, then health.
    Shape {
        min_rate: 1.0,
        max_rate: 1_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 800,
        health: &[
            (0, Health::Slow),
            (1_500, Health::Capacity(30)),
            (4_000, Health::Slow),
            (5_000, Health::Capacity(30)),
            (10_000, Health::Up),
        ],
        latency: (5, 60),
        overload_when: OverloadWhen::AnyRefusal,
    },
    // A low ceiling: the rate pinned at maxRate.
    Shape {
        min_rate: 0.5,
        max_rate: 12.0,
        beta: 0.8,
        scale: 1.0,
        ramp: 4.0,
        quiet_ms: 300,
        health: &[
            (0, Health::Down),
            (800, Health::Capacity(60)),
            (5_000, Health::Up),
        ],
        latency: (1, 5),
        overload_when: OverloadWhen::AnyRefusal,
    },
    // Flapping: down and up in turn, the gate turning on and off.
    Shape {
        min_rate: 0.5,
        max_rate: 10_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 200,
        health: &[
            (0, Health::Down),
            (600, Health::Up),
            (1_500, Health::Down),
            (2_000, Health::Capacity(20)),
            (6_000, Health::Up),
        ],
        latency: (1, 15),
        overload_when: OverloadWhen::AnyRefusal,
    },
    // `most-refused`: random failures that refuse too few to say overload
    // (watching), a share that outnumbers the acceptances (on, judging the
    // dependency to answer), an outage (on at once, probing) and a
    // recovery that fails a share at random.
    Shape {
        min_rate: 0.5,
        max_rate: 10_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 500,
        health: &[
            (0, Health::Up),
            (300, Health::Random(0.2)),
            (2_500, Health::Random(0.8)),
            (5_000, Health::Up),
            (7_000, Health::Down),
            (10_000, Health::CapacityAndRandom(25, 0.3)),
            (14_000, Health::Up),
        ],
        latency: (1, 15),
        overload_when: OverloadWhen::MostRefused,
    },
    // `most-refused` from a dependency down at the start, slow for a
    // while, then failing half at random.
    Shape {
        min_rate: 1.0,
        max_rate: 500.0,
        beta: 0.5,
        scale: 2.0,
        ramp: 20.0,
        quiet_ms: 300,
        health: &[
            (0, Health::Down),
            (1_500, Health::Random(0.5)),
            (5_000, Health::Slow),
            (6_000, Health::Capacity(20)),
            (9_000, Health::Random(0.1)),
        ],
        latency: (1, 10),
        overload_when: OverloadWhen::MostRefused,
    },
    // `evidence`, the default: the most-refused world above, where an
    // outage after acceptances is down only once ten refusals come in a row
    // (or three over a second), and its recovery is judged as any-refusal's.
    Shape {
        min_rate: 0.5,
        max_rate: 10_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 500,
        health: &[
            (0, Health::Up),
            (300, Health::Random(0.2)),
            (2_500, Health::Random(0.8)),
            (5_000, Health::Up),
            (7_000, Health::Down),
            (10_000, Health::CapacityAndRandom(25, 0.3)),
            (14_000, Health::Up),
        ],
        latency: (1, 15),
        overload_when: OverloadWhen::Evidence,
    },
    // `evidence` from a fresh process: a chance run of refusals at the
    // start (five in a row), then failing half at random (which the gate's
    // trials of its cuts find), then a capacity, then a tenth at random.
    Shape {
        min_rate: 1.0,
        max_rate: 500.0,
        beta: 0.5,
        scale: 2.0,
        ramp: 20.0,
        quiet_ms: 3_000,
        health: &[
            (0, Health::Down),
            (300, Health::Random(0.5)),
            (9_000, Health::Capacity(20)),
            (12_000, Health::Random(0.1)),
        ],
        latency: (1, 10),
        overload_when: OverloadWhen::Evidence,
    },
    // `evidence` from a fresh process: down from the start for more
    // refusals in a row than chance gives (so its cuts are not tried), back
    // failing half at random, then a capacity, then a tenth at random.
    Shape {
        min_rate: 5.0,
        max_rate: 500.0,
        beta: 0.5,
        scale: 2.0,
        ramp: 20.0,
        quiet_ms: 3_000,
        health: &[
            (0, Health::Down),
            (4_000, Health::Random(0.5)),
            (9_000, Health::Capacity(20)),
            (12_000, Health::Random(0.1)),
        ],
        latency: (1, 10),
        overload_when: OverloadWhen::Evidence,
    },
    // `evidence` at a trickle: refusals a second apart, so that three over
    // a second show the dependency down.
    Shape {
        min_rate: 0.5,
        max_rate: 1_000.0,
        beta: 0.7,
        scale: 0.4,
        ramp: 8.0,
        quiet_ms: 2_000,
        health: &[
            (0, Health::Up),
            (1_000, Health::Down),
            (8_000, Health::Capacity(10)),
            (12_000, Health::Up),
        ],
        latency: (200, 400),
        overload_when: OverloadWhen::Evidence,
    },
];

/// How long each scenario runs, and how many operations at most.
const RUN_MS: u64 = 16_000;
const MAX_OPS: usize = 1_200;

pub fn vectors() -> (Value, BTreeSet<&'static str>) {
    let mut scenarios = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, shape) in SHAPES.iter().enumerate() {
        let (scenario, visited) = scenario(shape, 1_000 + i as u64);
        scenarios.push(scenario);
        seen.extend(visited);
    }
    let about = "stormguard-core's send gate: for each scenario, a gate with the policy's `gate` block (as the daemon serves it), created off at time 0 and fed, at the given nanoseconds: `turn` (an attempt asks for a turn: \"now\" or [\"queued\", ticket]), `rejoin` (a call that waited under ticket `place` asks again: the same verdicts), `claim` (a ticket's holder claims: \"go\", [\"at\", nanoseconds when to claim again] or \"behind\"), `leave` (a ticket's holder gives up its place), `record` (the outcome, \"accepted\", \"overloaded\" or \"timed_out\", of an attempt sent at `sent`; when it turns the gate on, `draw` is the random first credit, in [0, 1), the gate drew), `lease` (the fleet grants `rate` until `until`), `pace` (the fleet's grant says pace: a watching gate turns on, drawing `draw` as a refusal's turning on would) and `tally` (what the gate saw since the last tally: sent, accepted, overloaded, timed out, waiting, whether it watches, whose counts are then of every attempt sent since the refusal that began it, and whether it asks the fleet: on, or watching a dependency that accepted something within three seconds). Each op ends with the gate's state after it: [on, the rate it paces at or null, its own rate or null, tickets waiting, its phase, its credit, watching (off, counting answers since a refusal, unless overloadWhen: any-refusal), answering (on unless any-refusal, judging the dependency to answer: a refusal cuts only while refusals outnumber acceptances)]. Phases: off, probing, slow_start, cubic (after a cut, below the rate cut from), regrown (back at or past it). Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.";
    (json!({ "about": about, "scenarios": scenarios }), seen)
}

/// An attempt sent and not answered yet: when its answer comes, and when it left.
struct InFlight {
    answer: u64,
    sent: u64,
}

fn scenario(shape: &Shape, seed: u64) -> (Value, BTreeSet<&'static str>) {
    let gate_policy = GatePolicy {
        enabled: true,
        min_rate: shape.min_rate,
        max_rate: shape.max_rate,
        beta: shape.beta,
        scale: shape.scale,
        ramp: shape.ramp,
        quiet: Duration::from_millis(shape.quiet_ms),
        overload_when: shape.overload_when,
        ..GatePolicy::default()
    };
    let policy = ValidPolicy::try_from(RetryPolicy {
        gate: gate_policy.clone(),
        ..RetryPolicy::default()
    })
    .expect("a valid gate");
    let t0 = Instant::now();
    let gate = SendGate::seeded_at(&policy, t0, seed);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ops = Recorder::default();
    let mut flying: Vec<InFlight> = Vec::new();
    let mut waiting: Vec<Ticket> = Vec::new();
    // Tickets whose calls got their turn: a retry of one rejoins at its place.
    let mut served: Vec<u64> = Vec::new();
    let mut next_claim: Option<u64> = None;
    let mut accepted_in_second = (0u64, 0u32);
    // Refusals in a row while off or probing: an outage's run, once long.
    let mut outage_run = 0u32;
    let mut next_tally = 100_000_000u64;
    let mut at = 0u64;
    let ms = 1_000_000u64;
    while at < RUN_MS * ms && ops.ops.len() < MAX_OPS {
        at += rng.random_range(0..24 * ms);
        let now = t0 + Duration::from_nanos(at);
        // Answers that have come.
        flying.sort_by_key(|f| f.answer);
        while flying.first().is_some_and(|f| f.answer <= at) {
            let attempt = flying.remove(0);
            let accepted = (Signal::Accepted, "accepted");
            let refused = (Signal::Overloaded, "overloaded");
            let mut within = |per_second: u32| {
                let second = attempt.answer / 1_000_000_000;
                if accepted_in_second.0 != second {
                    accepted_in_second = (second, 0);
                }
                let within = accepted_in_second.1 < per_second;
                accepted_in_second.1 += u32::from(within);
                within
            };
            let (signal, name) = match health_at(shape, attempt.answer) {
                Health::Up => accepted,
                Health::Down => refused,
                Health::Slow => (Signal::TimedOut, "timed_out"),
                Health::Capacity(per_second) if within(per_second) => accepted,
                Health::Capacity(_) => refused,
                Health::Random(share) if rng.random_bool(share) => refused,
                Health::Random(_) => accepted,
                Health::CapacityAndRandom(per_second, share)
                    if within(per_second) && !rng.random_bool(share) =>
                {
                    accepted
                }
                Health::CapacityAndRandom(..) => refused,
            };
            let (was_on, before) = (gate.is_on(), gate.own_rate());
            let was_answering = gate.is_answering();
            gate.record_at(signal, t0 + Duration::from_nanos(attempt.sent), now);
            let mut op = json!({"op": "record", "at": at, "signal": name, "sent": attempt.sent});
            if !was_on && gate.is_on() {
                op["draw"] = json!(gate.credit());
            }
            if signal == Signal::Overloaded && was_on && gate.own_rate() < before {
                ops.seen.insert("beta_cut");
            }
            if signal == Signal::Overloaded && gate.is_answering() && gate.own_rate() >= before {
                ops.seen.insert("refusal_not_overload");
            }
            let evidence = shape.overload_when == OverloadWhen::Evidence;
            if signal == Signal::Accepted {
                if evidence && outage_run >= 20 {
                    ops.seen.insert("accepted_after_an_outage_run");
                }
                outage_run = 0;
            } else if signal == Signal::Overloaded && (!was_on || gate.phase() == "probing") {
                outage_run += 1;
            }
            if evidence && !was_on && gate.phase() == "probing" {
                ops.seen.insert("evidence_down");
            }
            if evidence && was_on && !was_answering && gate.is_answering() {
                ops.seen.insert("trial_found_random");
            }
            ops.push(&gate, op);
        }
        // The first in line claims when its turn is due.
        if next_claim.is_some_and(|due| due <= at) {
            let first = waiting.first().expect("someone is first");
            let claim = gate.claim_at(first, now, None);
            let verdict = claim_verdict(claim, t0);
            next_claim = None;
            let number = first.number();
            if claim == Claim::Go {
                served.push(waiting.remove(0).number());
                fly(&mut flying, shape, &mut rng, at);
            } else if let Claim::At(when) = claim {
                next_claim = Some(nanos(when, t0));
            }
            ops.push(
                &gate,
                json!({"op": "claim", "at": at, "ticket": number, "verdict": verdict}),
            );
            if claim == Claim::Go {
                next_claim = first_due(&gate, t0, at);
            }
            continue;
        }
        // Callers come about 30 a second while the dependency is unwell, 4
        // a second while it is healthy, so that the gate can turn off.
        let calls = match health_at(shape, at) {
            Health::Up => 0.05,
            _ => 0.35,
        };
        let roll: f64 = rng.random();
        if roll < calls {
            // A new call, or a retry rejoining at its old place.
            let (turn, op) = if !served.is_empty() && rng.random_bool(0.15) {
                let place = served.swap_remove(rng.random_range(0..served.len()));
                let turn = gate.rejoin_at(place, stormguard_core::gate::Asker::default(), now);
                (turn, json!({"op": "rejoin", "at": at, "place": place}))
            } else {
                (gate.turn_at(now), json!({"op": "turn", "at": at}))
            };
            let mut op = op;
            match turn {
                Turn::Now => {
                    op["verdict"] = json!("now");
                    fly(&mut flying, shape, &mut rng, at);
                }
                Turn::Shed => unreachable!("no call here has a time its turn must come by"),
                Turn::Queued(ticket) => {
                    op["verdict"] = json!(["queued", ticket.number()]);
                    if !waiting.iter().any(|t| t.number() == ticket.number()) {
                        waiting.push(ticket);
                        waiting.sort();
                    }
                }
            }
            ops.push(&gate, op);
            next_claim = first_due(&gate, t0, at);
        } else if roll < calls + 0.07 && waiting.len() > 1 {
            // Someone behind the first claims (woken, or impatient).
            let i = rng.random_range(1..waiting.len());
            let claim = gate.claim_at(&waiting[i], now, None);
            ops.push(
                &gate,
                json!({"op": "claim", "at": at, "ticket": waiting[i].number(), "verdict": claim_verdict(claim, t0)}),
            );
        } else if roll < calls + 0.11 && !waiting.is_empty() {
            // A caller's deadline passes.
            let i = rng.random_range(0..waiting.len());
            let ticket = waiting.remove(i);
            let number = ticket.number();
            gate.leave(ticket);
            ops.push(&gate, json!({"op": "leave", "at": at, "ticket": number}));
            next_claim = first_due(&gate, t0, at);
        } else if roll < calls + 0.12 && gate.is_on() {
            // The fleet grants a rate for a while.
            let rate = f64::from(rng.random_range(1..400u32)) / 4.0;
            let until = at + rng.random_range(50..1_500) * ms;
            gate.lease_at(rate, t0 + Duration::from_nanos(until), now);
            ops.push(
                &gate,
                json!({"op": "lease", "at": at, "rate": rate, "until": until}),
            );
            next_claim = first_due(&gate, t0, at);
        } else if roll < calls + 0.13 && gate.is_watching() && gate.asks_fleet_at(now) {
            // The fleet, hearing every process that asks, says to pace.
            gate.pace_by_fleet_at(now);
            ops.seen.insert("paced_by_fleet");
            let op = json!({"op": "pace", "at": at, "draw": gate.credit()});
            ops.push(&gate, op);
            next_claim = first_due(&gate, t0, at);
        } else if at >= next_tally {
            next_tally = at + 300 * ms;
            let asks = gate.asks_fleet_at(now);
            let tally = gate.tally();
            let counts = json!({"sent": tally.sent, "accepted": tally.accepted, "overloaded": tally.overloaded,
                                "timedOut": tally.timed_out, "waiting": tally.waiting, "watching": tally.watching,
                                "asks": asks});
            ops.push(&gate, json!({"op": "tally", "at": at, "tally": counts}));
        }
    }
    let scenario = json!({"policy": {"gate": gate_policy}, "seed": seed, "ops": ops.ops});
    (scenario, ops.seen)
}

/// The ops of a scenario with the state after each, and what they visited.
#[derive(Default)]
struct Recorder {
    ops: Vec<Value>,
    seen: BTreeSet<&'static str>,
    was_on: bool,
}

impl Recorder {
    fn push(&mut self, gate: &SendGate, op: Value) {
        let state = state_of(gate);
        let on = gate.is_on();
        if self.was_on && !on {
            self.seen.insert("turned_off");
        }
        self.was_on = on;
        self.seen.insert(phase_of(&state));
        if gate.is_watching() {
            self.seen.insert("watching");
        }
        if gate.is_answering() {
            self.seen.insert("answering");
        }
        self.ops.push(json!([op, state]));
    }
}

/// An attempt leaves at `at`; its answer comes after the shape's latency.
fn fly(flying: &mut Vec<InFlight>, shape: &Shape, rng: &mut SmallRng, at: u64) {
    let latency = rng.random_range(shape.latency.0..=shape.latency.1) * 1_000_000;
    flying.push(InFlight {
        answer: at + latency,
        sent: at,
    });
}

/// When the first in line is to claim, if anyone waits: at once if its
/// turn has accrued by `at`.
fn first_due(gate: &SendGate, t0: Instant, at: u64) -> Option<u64> {
    let (_, due) = gate.first_in_line()?;
    Some(nanos(due, t0).max(at))
}

fn health_at(shape: &Shape, at: u64) -> Health {
    let ms = at / 1_000_000;
    shape
        .health
        .iter()
        .rev()
        .find(|(from, _)| *from <= ms)
        .map_or(Health::Up, |(_, health)| *health)
}

fn claim_verdict(claim: Claim, t0: Instant) -> Value {
    match claim {
        Claim::Go => json!("go"),
        Claim::At(when) => json!(["at", nanos(when, t0)]),
        Claim::Behind => json!("behind"),
    }
}

fn nanos(when: Instant, t0: Instant) -> u64 {
    when.saturating_duration_since(t0).as_nanos() as u64
}

/// [on, pace rate, own rate, waiting, phase, credit, watching, answering].
fn state_of(gate: &SendGate) -> Value {
    json!([
        gate.is_on(),
        gate.rate(),
        gate.own_rate(),
        gate.waiting(),
        gate.phase(),
        gate.credit(),
        gate.is_watching(),
        gate.is_answering(),
    ])
}

fn phase_of(state: &Value) -> &'static str {
    match state[4].as_str() {
        Some("probing") => "probing",
        Some("slow_start") => "slow_start",
        Some("cubic") => "cubic",
        Some("regrown") => "regrown",
        _ => "off",
    }
}

/// `vectors` as JSON with each scenario's ops one to a line.
pub fn one_op_a_line(vectors: &Value) -> String {
    let mut text = format!("{{\n  \"about\": {},\n  \"scenarios\": [\n", vectors["about"]);
    let scenarios = vectors["scenarios"].as_array().expect("scenarios");
    for (i, scenario) in scenarios.iter().enumerate() {
        let head = json!({"policy": scenario["policy"], "seed": scenario["seed"]}).to_string();
        text += &format!("    {},\n      \"ops\": [\n", head.trim_end_matches('}'));
        let ops = scenario["ops"].as_array().expect("ops");
        for (j, op) in ops.iter().enumerate() {
            let comma = if j + 1 < ops.len() { "," } else { "" };
            text += &format!("        {op}{comma}\n");
        }
        let comma = if i + 1 < scenarios.len() { "," } else { "" };
        text += &format!("      ]\n    }}{comma}\n");
    }
    text + "  ]\n}\n"
}
