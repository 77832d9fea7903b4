//! What `tune` prints: a table of the current and recommended policies on
//! each outage, the recommendation as a block to paste into a policy file,
//! as JSON, and as per-second pictures.

use std::fmt::Write;

use serde::Serialize;
use stormguard_core::policy::{GoDuration, Jitter, RetryPolicy};

use super::{Bounds, Candidate, Figures, OnNeighbour, Tuning};
use crate::sim::{small_multiples, Fleet};
use crate::text::columns;

/// The report as text; `elapsed` is how long the search took.
pub fn text(t: &Tuning, elapsed: std::time::Duration) -> String {
    let r = &t.request;
    let mut out = format!("tune: {}: {}\n", origin(t), world(t));
    let _ = writeln!(
        out,
        "bounds on every outage: {}\n",
        bounds(&t.bounds, r.max_p99.is_some())
    );
    let mut rows = vec![["OUTAGE", "POLICY", "WASTED", "P99", "GAVE UP"]
        .map(str::to_owned)
        .to_vec()];
    for (i, outage) in r.outages.iter().enumerate() {
        let mut row = |name: &str, c: &Candidate| {
            let f = &c.figures[i];
            rows.push(vec![
                seconds(*outage),
                name.to_owned(),
                format!("{:.0}", f.wasted),
                f.p99_seconds.map_or("-".into(), |p| format!("{p:.1}s")),
                format!("{:.1}%", f.gave_up * 100.0),
            ]);
        };
        row("current", &t.current);
        row("recommended", &t.recommended);
        if let Some(plain) = &t.without_gate {
            row("without the gate", plain);
        }
    }
    out.push_str(&columns(&rows));
    out.push_str(&fresh(t));
    out.push_str(&around(t));
    let _ = writeln!(
        out,
        "\nsearched {} policies in {:.1}s: a coarse grid, then one setting at a time from the best; the same seeds for every policy",
        t.searched,
        elapsed.as_secs_f64()
    );
    out.push_str(&advice(t));
    out
}

/// The policies on the fresh seeds: what to expect of them, where the
/// table above is what the search chose by.
fn fresh(t: &Tuning) -> String {
    let f = &t.fresh;
    let mut out = format!(
        "\non {} fresh seeds ({}-{}), which the search never ran: what to expect (p99 mean ± spread over the seeds)\n",
        f.seeds,
        f.seed,
        f.seed + u64::from(f.seeds.max(1)) - 1
    );
    let mut rows = vec![["OUTAGE", "POLICY", "WASTED", "P99", "GAVE UP"]
        .map(str::to_owned)
        .to_vec()];
    let mut sides = vec![("current", &f.current), ("recommended", &f.recommended)];
    if let Some(plain) = &f.without_gate {
        sides.push(("without the gate", plain));
    }
    for (i, outage) in t.request.outages.iter().enumerate() {
        for (name, figures) in &sides {
            let Some(f) = figures.get(i) else { continue };
            rows.push(vec![
                seconds(*outage),
                (*name).to_owned(),
                format!("{:.0}", f.wasted),
                f.p99_seconds.map_or("-".into(), |p| match f.p99_spread_seconds {
                    Some(spread) => format!("{p:.1}s ± {spread:.1}s"),
                    None => format!("{p:.1}s"),
                }),
                format!("{:.1}%", f.gave_up * 100.0),
            ]);
        }
    }
    out.push_str(&columns(&rows));
    out
}

/// A duration in seconds, as a person writes an outage: `2s`, `60s`, `0.5s`.
fn seconds(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

fn origin(t: &Tuning) -> String {
    match &t.request.service {
        Some((path, service)) => format!("{service} in {path}"),
        None => {
            "the simulator's full-jitter herd (100ms × 2^attempt, capped at 10s, retried until served)".into()
        }
    }
}

fn world(t: &Tuning) -> String {
    let r = &t.request;
    let s = &r.scenario;
    let arrival = if s.spread.is_zero() {
        "all failing at once".to_owned()
    } else {
        format!("failing over {}", GoDuration(s.spread))
    };
    let outages: Vec<String> = r.outages.iter().map(|o| seconds(*o)).collect();
    format!(
        "{}, {arrival}; {} requests/s, outages of {}; searched on the means over seeds {}-{}",
        s.shape(),
        s.capacity,
        outages.join(", "),
        s.seed,
        s.seed + u64::from(r.seeds) - 1
    )
}

fn bounds(b: &Bounds, given: bool) -> String {
    let p99 = if given {
        let bound = b.max_p99_seconds.first().copied().flatten().unwrap_or(0.0);
        format!("p99 time to success at most {bound:.1}s")
    } else {
        "p99 time to success no later than the current policy's (or, where it gives up on more, than full jitter's, retried until served)".to_owned()
    };
    format!(
        "{p99}; at most {:.1}% of the clients give up (searched for at most {:.1}%, a margin for other seeds)",
        b.max_gave_up * 100.0,
        b.max_gave_up * super::GAVE_UP_MARGIN * 100.0
    )
}

/// How the recommended policy does on the fleets around the stated one,
/// each against that fleet's bounds.
fn around(t: &Tuning) -> String {
    if t.recommended.neighbours.is_empty() {
        return String::new();
    }
    let mut out = "\nthe recommendation on fleets around the stated one and against the other dependency \
                   models, each held to its own bounds (the current policy's p99 there):\n"
        .to_owned();
    let mut rows = vec![["FLEET", "OUTAGE", "WASTED", "P99", "GAVE UP", "BOUNDS"]
        .map(str::to_owned)
        .to_vec()];
    for on in &t.recommended.neighbours {
        for (outage, f) in t.request.outages.iter().zip(&on.figures) {
            rows.push(vec![
                on.fleet.clone(),
                seconds(*outage),
                format!("{:.0}", f.wasted),
                f.p99_seconds.map_or("-".into(), |p| format!("{p:.1}s")),
                format!("{:.1}%", f.gave_up * 100.0),
                if on.within_bounds { "hold" } else { "broken" }.to_owned(),
            ]);
        }
    }
    out.push_str(&columns(&rows));
    let broken = super::neighbours::models_broken_alone(&t.recommended.neighbours);
    if !broken.is_empty() {
        let stated = &t.request.scenario;
        out.push_str(&held_on_stated_alone(
            &stated.dependency.describe(stated.capacity),
            &broken,
        ));
    } else if !super::neighbours::hold_everywhere(&t.recommended.neighbours) {
        out.push_str(
            "no candidate near the best holds its bounds on every one of these fleets; the recommendation is the best on the stated one\n",
        );
    }
    out
}

/// The line for a recommendation that holds on every fleet against the
/// `stated` dependency but breaks against the `broken` models.
fn held_on_stated_alone(stated: &str, broken: &[&str]) -> String {
    format!(
        "the recommendation holds on every fleet against the dependency stated ({stated}), but not {}: \
         set the forecast's dependency to how the service really refuses\n",
        broken.join(", nor ")
    )
}

/// What to do with the result, in words and as a block to paste.
fn advice(t: &Tuning) -> String {
    let mut out = String::new();
    if t.recommended.knobs == t.current.knobs && t.recommended.policy == t.current.policy {
        out.push_str("\nno policy found that does better within the bounds: keep the current one\n");
        if !t.keeps_bounds(&t.current) {
            out.push_str(
                "(the current policy itself breaks the bounds; loosen --max-p99 or --max-gave-up)\n",
            );
        }
        return out;
    }
    if !t.keeps_bounds(&t.recommended) {
        out.push_str("\nno policy found keeps every bound; the closest:\n");
    }
    let _ = write!(out, "\nrecommended, {}", placement(t));
    out.push_str(&block(t, &t.recommended));
    if let Some(plain) = &t.without_gate {
        out.push_str(
            "\nThe recommendation turns on the send gate, which paces callers through the stormguard client\n\
             library (and the daemon, with its reporter running). For callers without the library, the best\n\
             found:\n",
        );
        out.push_str(&block(t, plain));
    }
    out
}

fn placement(t: &Tuning) -> &'static str {
    match &t.request.service {
        Some(_) => "to put under `services:` in the policy file (the keys that change):\n",
        None => "as a policy file's defaults:\n",
    }
}

/// The keys of `c`'s policy that differ from the current one (all of the
/// searched ones when there is no policy file to differ from).
fn block(t: &Tuning, c: &Candidate) -> String {
    let (mut out, indent) = match &t.request.service {
        Some((_, service)) => (format!("  {service}:\n"), "    "),
        None => ("defaults:\n".to_owned(), "  "),
    };
    let complete = t.request.service.is_none();
    for (key, value) in changes(&t.current.policy, &c.policy, complete) {
        let _ = writeln!(out, "{indent}{key}: {value}");
    }
    out
}

/// `(key, value)` pairs, in the policy file's words, for the searched
/// settings of `to` that differ from `from` (or all of them if `complete`).
pub fn changes(from: &RetryPolicy, to: &RetryPolicy, complete: bool) -> Vec<(&'static str, String)> {
    let on = |enabled: bool| format!("{{enabled: {enabled}}}");
    let settings = [
        (from.jitter != to.jitter, "jitter", to.jitter.to_string()),
        (
            from.initial_delay != to.initial_delay,
            "initialDelay",
            GoDuration(to.initial_delay).to_string(),
        ),
        (
            from.max_delay != to.max_delay,
            "maxDelay",
            GoDuration(to.max_delay).to_string(),
        ),
        (
            to.jitter != Jitter::Decorrelated && from.multiplier != to.multiplier,
            "multiplier",
            format!("{:?}", to.multiplier),
        ),
        (
            from.max_retries != to.max_retries,
            "maxRetries",
            to.max_retries.to_string(),
        ),
        (
            from.max_elapsed != to.max_elapsed,
            "maxElapsed",
            GoDuration(to.max_elapsed.unwrap_or_default()).to_string(),
        ),
        (
            from.budget.enabled != to.budget.enabled,
            "budget",
            on(to.budget.enabled),
        ),
        (from.gate.enabled != to.gate.enabled, "gate", on(to.gate.enabled)),
    ];
    let mut out: Vec<(&'static str, String)> = settings
        .into_iter()
        .filter(|(differs, _, _)| complete || *differs)
        .map(|(_, key, value)| (key, value))
        .collect();
    if !from.delays.is_empty() && to.delays.is_empty() {
        out.push(("delays", "[]".to_owned()));
    }
    out
}

/// The report as JSON.
pub fn json(t: &Tuning) -> String {
    #[derive(Serialize)]
    struct Report<'a> {
        service: Option<&'a str>,
        policy_file: Option<&'a str>,
        clients: u32,
        capacity: u32,
        #[serde(flatten)]
        fleet: Fleet,
        spread_seconds: f64,
        outages_seconds: Vec<f64>,
        seeds: Vec<u64>,
        bounds: &'a Bounds,
        current: Side<'a>,
        recommended: Side<'a>,
        without_gate: Option<Side<'a>>,
        searched: usize,
        fresh: FreshSides<'a>,
    }
    /// The figures on seeds the search never ran.
    #[derive(Serialize)]
    struct FreshSides<'a> {
        seeds: Vec<u64>,
        current: &'a [Figures],
        recommended: &'a [Figures],
        without_gate: Option<&'a [Figures]>,
    }
    let r = &t.request;
    let complete = r.service.is_none();
    let side = |c| side(t, c, complete);
    let report = Report {
        service: r.service.as_ref().map(|(_, s)| s.as_str()),
        policy_file: r.service.as_ref().map(|(p, _)| p.as_str()),
        clients: r.scenario.clients,
        capacity: r.scenario.capacity,
        fleet: Fleet::from(&r.scenario),
        spread_seconds: r.scenario.spread.as_secs_f64(),
        outages_seconds: r.outages.iter().map(|o| o.as_secs_f64()).collect(),
        seeds: (0..u64::from(r.seeds)).map(|i| r.scenario.seed + i).collect(),
        bounds: &t.bounds,
        current: side(&t.current),
        recommended: side(&t.recommended),
        without_gate: t.without_gate.as_ref().map(side),
        searched: t.searched,
        fresh: FreshSides {
            seeds: (0..u64::from(t.fresh.seeds)).map(|i| t.fresh.seed + i).collect(),
            current: &t.fresh.current,
            recommended: &t.fresh.recommended,
            without_gate: t.fresh.without_gate.as_deref(),
        },
    };
    serde_json::to_string_pretty(&report).expect("plain data") + "\n"
}

#[derive(Serialize)]
struct Side<'a> {
    figures: &'a [Figures],
    /// Whether it keeps the bounds asked for, on every outage.
    within_bounds: bool,
    /// The keys to set, in the policy file's words.
    settings: Vec<(&'static str, String)>,
    /// How it does on the fleets around the stated one.
    neighbours: &'a [OnNeighbour],
}

fn side<'a>(t: &Tuning, c: &'a Candidate, complete: bool) -> Side<'a> {
    Side {
        figures: &c.figures,
        within_bounds: t.keeps_bounds(c),
        settings: changes(&t.current.policy, &c.policy, complete),
        neighbours: &c.neighbours,
    }
}

/// The requests per second of the runs on the first seed, on every outage, current against
/// recommended (and without the gate), one panel each.
pub fn svg(t: &Tuning) -> String {
    let mut sides = vec![("current", &t.current), ("recommended", &t.recommended)];
    if let Some(plain) = &t.without_gate {
        sides.push(("without the gate", plain));
    }
    let mut summaries = Vec::new();
    for outage in &t.request.outages {
        let family = super::Family {
            scenario: t.request.scenario.clone(),
            outages: vec![*outage],
            seeds: 1,
        };
        for (name, c) in &sides {
            let label = format!("{name}, {} outage", seconds(*outage));
            if let Some(runs) = family.runs(&label, &c.policy, 1) {
                summaries.extend(runs.into_iter().flatten());
            }
        }
    }
    small_multiples(&summaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recommendation_broken_on_other_models_alone_names_them_and_what_to_set() {
        let line = held_on_stated_alone(
            "a quota of 200 a second",
            &["against a token bucket of 200/s, burst 20", "against 20 workers"],
        );
        assert_eq!(
            line,
            "the recommendation holds on every fleet against the dependency stated (a quota of 200 a second), \
             but not against a token bucket of 200/s, burst 20, nor against 20 workers: set the forecast's \
             dependency to how the service really refuses\n"
        );
    }
}
