//! Text for people: the per-second histogram, a summary, and the
//! `--compare` table.

use std::fmt::Write;

use super::report::Summary;

/// Rows a histogram fits in; longer runs are drawn a few seconds a row.
const MAX_ROWS: usize = 80;
/// Width of the longest bar.
const BAR: usize = 50;

/// The per-second histogram: `█` accepted, `░` rejected.
pub fn histogram(summary: &Summary) -> String {
    let seconds = summary.requests_per_second.len();
    let step = seconds.div_ceil(MAX_ROWS).max(1);
    let rows: Vec<(usize, u64, u64)> = (0..seconds)
        .step_by(step)
        .map(|start| {
            let end = (start + step).min(seconds);
            let requests = summary.requests_per_second[start..end].iter().sum();
            let accepted = summary.accepted_per_second[start..end].iter().sum();
            (start, requests, accepted)
        })
        .collect();
    let widest = rows.iter().map(|(_, r, _)| *r).max().unwrap_or(0).max(1);
    let mut out = String::new();
    let unit = if step == 1 {
        "second".to_string()
    } else {
        format!("{step} seconds")
    };
    let _ = writeln!(
        out,
        "{}: requests per {unit} (█ accepted, ░ rejected)",
        summary.strategy
    );
    for (start, requests, accepted) in rows {
        let scale = |n: u64| ((n as f64 / widest as f64) * BAR as f64).ceil() as usize;
        let ok = scale(accepted);
        let rejected = scale(requests).saturating_sub(ok);
        let _ = writeln!(
            out,
            "{start:>5}s {:>10} {:>8} ok  {}{}",
            requests,
            accepted,
            "█".repeat(ok),
            "░".repeat(rejected)
        );
    }
    out
}

/// The summary of one run, one figure a line.
pub fn summary(s: &Summary) -> String {
    let seconds = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} s"));
    let mut out = String::new();
    let lines = [
        ("requests", s.total_requests.to_string()),
        ("accepted", s.accepted.to_string()),
        (
            "wasted (rejected)",
            format!(
                "{} ({} during the outage, {} after it)",
                s.wasted, s.wasted_during_outage, s.wasted_after_outage
            ),
        ),
        (
            "over capacity",
            format!(
                "{} after the outage (peak {} over in one second)",
                s.over_capacity, s.peak_overshoot
            ),
        ),
        (
            "peak after outage",
            format!("{} requests/s", s.peak_requests_per_second_after_outage),
        ),
        (
            "stable",
            s.time_to_stable_seconds
                .map_or("never".to_string(), |t| format!("{t} s after the outage")),
        ),
        (
            "time to success",
            format!(
                "p50 {}, p99 {}, max {}",
                seconds(s.p50_seconds),
                seconds(s.p99_seconds),
                seconds(s.max_seconds)
            ),
        ),
        ("last success", seconds(s.last_success_seconds)),
        ("drained", format!("{:.2} s", s.drain_seconds)),
        (
            "clients",
            format!(
                "{} served, {} gave up (retries {}, budget {}, breaker {}, deadline {}, no turn {}), {} unfinished",
                s.succeeded,
                s.gave_up,
                s.gave_up_exhausted,
                s.gave_up_budget,
                s.gave_up_circuit_open,
                s.gave_up_deadline,
                s.gave_up_no_turn,
                s.unfinished
            ),
        ),
        ("events", s.events.to_string()),
    ];
    let trials = (s.half_open_trials > 0).then(|| {
        (
            "half-open trials",
            format!(
                "{} in all, at most {} within one openTimeout; {}",
                s.half_open_trials,
                s.half_open_trials_per_window,
                s.breakers_closed_seconds
                    .map_or("a breaker still open at the end".to_string(), |at| {
                        format!("every breaker closed {at:.2} s after the outage")
                    })
            ),
        )
    });
    for (name, value) in lines.into_iter().chain(trials) {
        let _ = writeln!(out, "  {name:<18} {value}");
    }
    out
}

/// One row per strategy, for `--compare`.
pub fn table(summaries: &[Summary]) -> String {
    let header = [
        "strategy",
        "requests",
        "wasted",
        "in outage",
        "after",
        "over cap",
        "peak/s",
        "stable",
        "p50 s",
        "p99 s",
        "max s",
        "drained s",
        "gave up",
    ];
    let rows: Vec<[String; 13]> = summaries
        .iter()
        .map(|s| {
            let secs = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            [
                s.strategy.clone(),
                s.total_requests.to_string(),
                s.wasted.to_string(),
                s.wasted_during_outage.to_string(),
                s.wasted_after_outage.to_string(),
                s.over_capacity.to_string(),
                s.peak_requests_per_second_after_outage.to_string(),
                s.time_to_stable_seconds
                    .map_or("-".to_string(), |t| t.to_string()),
                secs(s.p50_seconds),
                secs(s.p99_seconds),
                secs(s.max_seconds),
                format!("{:.1}", s.drain_seconds),
                (s.gave_up + s.unfinished).to_string(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        for (i, cell) in cells.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}", w = widths[i]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for row in &rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}
