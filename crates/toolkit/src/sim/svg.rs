//! Pictures of runs: small multiples of the per-second histograms, one
//! panel per strategy, on the same axes so that they compare at a glance.
//!
//! The y axis is logarithmic: constant retries reach hundreds of thousands
//! of requests a second, and on a linear axis every other strategy would be
//! a flat line beside them.

use std::fmt::Write;

use super::report::Summary;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 150.0;
const GAP: f64 = 46.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 40.0;

/// An SVG document with one histogram panel per summary.
pub fn small_multiples(summaries: &[Summary]) -> String {
    let seconds = summaries
        .iter()
        .map(|s| s.requests_per_second.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let peak = summaries
        .iter()
        .flat_map(|s| s.requests_per_second.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    let axes = Axes {
        seconds,
        decades: (peak as f64).log10().ceil().max(1.0),
    };
    let height = TOP + summaries.len() as f64 * (PANEL + GAP);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    if let Some(first) = summaries.first() {
        let one_outage = summaries.iter().all(|s| s.outage_seconds == first.outage_seconds);
        let outage = if one_outage {
            format!(", outage {} s", first.outage_seconds)
        } else {
            String::new()
        };
        let world = match first.capacity {
            Some(capacity) => format!("{} clients, capacity {capacity}/s{outage}", first.clients),
            None => format!("the {} scenario, {} calls", first.scenario, first.clients),
        };
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="22" font-size="14" font-weight="bold">Requests per second: {world}, seed {}</text>"#,
            first.seed
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="22" text-anchor="end"><tspan fill="#4caf50">■ accepted</tspan>  <tspan fill="#ef8a62">■ rejected</tspan>  <tspan fill="#d62728">-- capacity</tspan>  <tspan fill="#999999">▒ outage</tspan></text>"##,
            WIDTH - RIGHT
        );
    }
    for (i, summary) in summaries.iter().enumerate() {
        panel(&mut svg, summary, &axes, TOP + i as f64 * (PANEL + GAP) + 18.0);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The axes every panel shares.
struct Axes {
    seconds: usize,
    /// Powers of ten on the y axis.
    decades: f64,
}

impl Axes {
    fn x(&self, second: f64) -> f64 {
        LEFT + second / self.seconds as f64 * (WIDTH - LEFT - RIGHT)
    }

    /// Height of a bar of `n` requests on the log axis (0 for none; 1 request is a sliver).
    fn height(&self, n: u64) -> f64 {
        if n == 0 {
            return 0.0;
        }
        ((n as f64).log10() / self.decades * PANEL).max(1.0)
    }
}

fn panel(svg: &mut String, s: &Summary, axes: &Axes, top: f64) {
    let bottom = top + PANEL;
    let p99 = s.p99_seconds.map_or("-".to_string(), |p| format!("{p:.1} s"));
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text><text x="{}" y="{}" text-anchor="end">{} requests, {} wasted, {} over capacity, p99 {p99}, {} gave up</text>"#,
        top - 6.0,
        escape(&s.strategy),
        WIDTH - RIGHT,
        top - 6.0,
        s.total_requests,
        s.wasted,
        s.over_capacity,
        s.gave_up + s.unfinished
    );
    let outage_end = axes.x(s.outage_seconds.min(axes.seconds as f64));
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL}" fill="#eeeeee"/>"##,
        outage_end - LEFT
    );
    for decade in 0..=axes.decades as u32 {
        let y = bottom - f64::from(decade) / axes.decades * PANEL;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#dddddd"/><text x="{}" y="{}" text-anchor="end" fill="#666666">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            power_of_ten(decade)
        );
    }
    let bar = (axes.x(1.0) - axes.x(0.0)).max(1.0);
    for (second, (&requests, &accepted)) in s
        .requests_per_second
        .iter()
        .zip(&s.accepted_per_second)
        .enumerate()
    {
        let x = axes.x(second as f64);
        for (n, colour) in [(requests, "#ef8a62"), (accepted, "#4caf50")] {
            let h = axes.height(n);
            if h > 0.0 {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{colour}"><title>second {second}: {requests} requests, {accepted} accepted</title></rect>"#,
                    bottom - h,
                    (bar - 1.0).max(0.5)
                );
            }
        }
    }
    if let Some(capacity) = s.capacity {
        let capacity = bottom - axes.height(u64::from(capacity));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{capacity:.1}" x2="{}" y2="{capacity:.1}" stroke="#d62728" stroke-dasharray="5,3"/>"##,
            WIDTH - RIGHT
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#333333"/>"##,
        WIDTH - RIGHT
    );
    let step = tick_step(axes.seconds);
    for second in (0..=axes.seconds).step_by(step) {
        let x = axes.x(second as f64);
        let _ = writeln!(
            svg,
            r##"<text x="{x:.1}" y="{}" text-anchor="middle" fill="#666666">{second}s</text>"##,
            bottom + 13.0
        );
    }
}

fn power_of_ten(decade: u32) -> String {
    match decade {
        0 => "1".into(),
        1 => "10".into(),
        2 => "100".into(),
        3 => "1k".into(),
        4 => "10k".into(),
        5 => "100k".into(),
        6 => "1M".into(),
        n => format!("1e{n}"),
    }
}

/// Seconds between x labels: about ten labels whatever the length.
fn tick_step(seconds: usize) -> usize {
    [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600]
        .into_iter()
        .find(|step| seconds / step <= 12)
        .unwrap_or(3600)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{run, Modifiers, Named, Scenario, Strategy};

    fn summaries() -> Vec<Summary> {
        [Named::Exponential, Named::FullJitter]
            .map(|n| {
                Summary::of(&run(
                    &Scenario::default(),
                    &Strategy::named(n, Modifiers::default()),
                ))
            })
            .to_vec()
    }

    #[test]
    fn one_panel_per_strategy_on_shared_axes() {
        let svg = small_multiples(&summaries());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(">exponential</text>").count(), 1);
        assert_eq!(svg.matches(">full-jitter</text>").count(), 1);
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            2,
            "a capacity line per panel"
        );
        // Exponential's 9 busy seconds and full jitter's 20 are drawn as bars with tooltips.
        assert_eq!(svg.matches("<title>second").count() % 2, 0);
        assert!(svg.contains("<title>second 52: 200 requests, 200 accepted</title>"));
        // Same x axis: both panels label the same last tick.
        assert_eq!(svg.matches(">50s</text>").count(), 2);
    }

    #[test]
    fn labels_are_escaped() {
        let mut s = summaries().remove(0);
        s.strategy = "a<b>&c".into();
        assert!(small_multiples(&[s]).contains("a&lt;b&gt;&amp;c"));
    }
}
