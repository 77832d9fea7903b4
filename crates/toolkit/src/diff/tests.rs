//! Tests of policy diffs: which services a change reaches, renames, and the forecast and warning
//! changes a pipeline gates on.

use super::*;
use crate::policy::{load_bytes, LoadLimits};

fn document(yaml: &str) -> PolicyDocument {
    load_bytes("test.yaml", yaml.as_bytes(), LoadLimits::default()).expect("a valid policy")
}

/// The text lines of the diff, forecasts left out.
fn keys_only(diff: &Diff) -> Vec<String> {
    as_text(diff)
        .lines()
        .filter(|line| !line.trim_start().starts_with("forecast"))
        .map(str::to_string)
        .collect()
}

/// Retries that outlast the forecast's outage, so that no warning but the
/// one a test adds is in play.
const BASE: &str = "\
defaults:
  maxRetries: 3
  initialDelay: 100ms
services:
  payments:
    maxRetries: 2
  search:
    initialDelay: 50ms
forecast:
  outages: [200ms]
";

#[test]
fn a_defaults_change_reaches_every_service_but_the_one_that_overrides_it() {
    let new = BASE.replace(
        "  maxRetries: 3\n  initialDelay",
        "  maxRetries: 4\n  initialDelay",
    );
    let diff = diff(&document(BASE), &document(&new), 0.1);
    assert_eq!(
        keys_only(&diff),
        [
            "(defaults)",
            "  maxRetries: 3 -> 4 (defaults)",
            "search",
            "  maxRetries: 3 -> 4 (defaults)",
        ],
        "payments overrides maxRetries: unchanged"
    );
    let search = &diff.services[1];
    assert_eq!(search.forecasts.len(), 1, "one outage stated by default");
    assert!(
        search.forecasts[0].new.wasted >= search.forecasts[0].old.wasted,
        "one more retry: no less load"
    );
}

#[test]
fn a_renamed_service_is_one_removed_and_one_added() {
    let new = BASE.replace("  search:", "  find:");
    let diff = diff(&document(BASE), &document(&new), 0.1);
    assert_eq!(
        keys_only(&diff),
        [
            "find (added: it got the defaults until now)",
            "  initialDelay: 100ms -> 50ms (override)",
            "search (removed: it gets the defaults from now on)",
            "  initialDelay: 50ms -> 100ms (defaults)",
        ]
    );
    assert!(!diff.worsens() || diff.services.iter().any(|s| s.forecasts.iter().any(|f| f.worse)));
}

#[test]
fn a_gate_turned_on_is_a_key_change_and_its_forecast_improves() {
    let new = BASE.replace(
        "    maxRetries: 2\n",
        "    maxRetries: 2\n    gate:\n      enabled: true\n",
    );
    let diff = diff(&document(BASE), &document(&new), 0.1);
    assert_eq!(
        keys_only(&diff),
        ["payments", "  gate.enabled: false -> true (override)"]
    );
    let forecast = &diff.services[0].forecasts[0];
    assert!(
        forecast.new.wasted < forecast.old.wasted && !forecast.worse,
        "paced: less waste, not worse: {forecast:?}"
    );
    assert!(!diff.worsens());
}

#[test]
fn a_change_that_worsens_a_forecast_or_adds_a_warning_is_what_a_pipeline_gates_on() {
    let new = BASE.replace(
        "  initialDelay: 100ms\n",
        "  initialDelay: 100ms\n  jitter: none\n",
    );
    let diff = diff(&document(BASE), &document(&new), 0.1);
    let added: Vec<(&str, &str)> = diff
        .warnings_added
        .iter()
        .map(|w| (w.service.as_str(), w.rule.code()))
        .collect();
    assert_eq!(added, [("(defaults)", "no-jitter")]);
    assert!(diff.worsens());
    assert!(as_text(&diff).contains("lint + (defaults) no-jitter: "));
    let back = super::diff(&document(&new), &document(BASE), 0.1);
    assert_eq!(back.warnings_cleared.len(), 1);
    assert!(as_text(&super::diff(&document(BASE), &document(BASE), 0.1))
        .starts_with("no service's resolved policy changes"));
}

#[test]
fn worse_is_more_give_ups_more_waste_past_the_threshold_or_a_later_p99_serving_no_more() {
    let figures = |wasted, p99, gave_up| Figures {
        wasted,
        p99_seconds: p99,
        gave_up,
    };
    let old = figures(1000, Some(10.0), 5);
    assert!(!worse(old, figures(1099, Some(10.9), 5), 0.1), "within 10 %");
    assert!(worse(old, figures(1101, Some(10.0), 5), 0.1), "waste");
    assert!(
        worse(old, figures(1000, Some(11.1), 5), 0.1),
        "p99, serving no more"
    );
    assert!(
        !worse(old, figures(900, Some(20.0), 0), 0.1),
        "later, but serving the calls given up on"
    );
    assert!(
        worse(old, figures(900, Some(9.0), 6), 0.1),
        "a call more given up"
    );
    assert!(worse(old, figures(900, None, 5), 0.1), "nobody served");
}
