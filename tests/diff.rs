//! `stormguard diff` end to end: the real binary on pairs of policy files,
//! its text, its JSON and the exit codes a pipeline gates on.

use std::path::PathBuf;
use std::process::{Command, Output};

fn files(old: &str, new: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("old.yaml"), dir.path().join("new.yaml"));
    std::fs::write(&a, old).unwrap();
    std::fs::write(&b, new).unwrap();
    (dir, a, b)
}

fn diff(old: &str, new: &str, extra: &[&str]) -> Output {
    let (_dir, a, b) = files(old, new);
    Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("diff")
        .args([&a, &b])
        .args(extra)
        .output()
        .expect("the stormguard binary runs")
}

const BASE: &str = "\
defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: 2
  inventory:
    initialDelay: 50ms
forecast:
  outages: [200ms]
";

#[test]
fn a_gate_turned_on_is_shown_with_its_forecast_and_exits_0() {
    let gated = BASE.replace(
        "    maxRetries: 2\n",
        "    maxRetries: 2\n    gate:\n      enabled: true\n",
    );
    let out = diff(BASE, &gated, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..2],
        ["payments", "  gate.enabled: false -> true (override)"]
    );
    assert!(
        lines[2].starts_with("  forecast, 200ms outage: wasted "),
        "{text}"
    );
    assert!(!text.contains("WORSE"), "{text}");
}

#[test]
fn a_change_that_worsens_a_forecast_exits_2_and_json_says_why() {
    let more = BASE.replace("  maxRetries: 3\n", "  maxRetries: 6\n");
    let out = diff(BASE, &more, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "more retries into a 200ms outage waste more"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let services: Vec<&str> = json["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["service"].as_str().unwrap())
        .collect();
    assert_eq!(
        services,
        ["(defaults)", "inventory"],
        "payments overrides maxRetries"
    );
    let key = &json["services"][1]["keys"][0];
    assert_eq!(
        (&key["key"], &key["old"], &key["new"], &key["from"]),
        (&"maxRetries".into(), &"3".into(), &"6".into(), &"defaults".into())
    );
    assert_eq!(json["services"][1]["forecasts"][0]["worse"], true);
    assert_eq!(json["threshold"], 0.1);
    let lenient = diff(BASE, &more, &["--threshold", "1"]);
    assert_eq!(
        lenient.status.code(),
        Some(0),
        "waste grows less than 100 % and fewer calls give up: {}",
        String::from_utf8_lossy(&lenient.stdout)
    );
}

#[test]
fn an_invalid_file_is_named_and_exits_1_and_the_same_file_changes_nothing() {
    let out = diff(BASE, "defaults:\n  maxRetries: many\n", &[]);
    assert_eq!(out.status.code(), Some(1));
    let errors = String::from_utf8(out.stderr).unwrap();
    assert!(errors.contains("new.yaml:2:15: defaults.maxRetries"), "{errors}");
    let same = diff(BASE, BASE, &[]);
    assert_eq!(same.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(same.stdout).unwrap(),
        "no service's resolved policy changes\n"
    );
}
