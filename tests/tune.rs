//! `stormguard tune` end to end: the real binary, and its recommendation
//! pasted into a policy file giving what it promised.

use std::process::{Command, Output};

fn stormguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(args)
        .output()
        .expect("the stormguard binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// `file` with `tuned`'s recommended settings pasted under its `orders: {}`.
fn paste(file: &str, tuned: &serde_json::Value) -> String {
    let mut block = String::new();
    for pair in tuned["recommended"]["settings"].as_array().unwrap() {
        let (key, value) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        block.push_str(&format!("    {key}: {value}\n"));
    }
    file.replace("  orders: {}\n", &format!("  orders:\n{block}"))
}

/// A policy file whose `orders` service retries three times, 100ms apart and up.
const SHIPPED: &str = "defaults:\n  maxRetries: 3\n  initialDelay: 100ms\n  maxDelay: 10s\n  jitter: full\nservices:\n  orders: {}\n";

#[test]
fn the_recommendation_pasted_into_the_file_gives_the_figures_tune_promised() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = dir.path().join("shipped.yaml");
    std::fs::write(&shipped, SHIPPED).unwrap();
    let shipped = shipped.to_str().unwrap();
    let tuned: serde_json::Value = serde_json::from_str(&stdout(&stormguard(&[
        "tune",
        "--policy",
        shipped,
        "--service",
        "orders",
        "--outages",
        "10s",
        "--seeds",
        "2",
        "--without-gate",
        "--json",
    ])))
    .unwrap();
    let current = &tuned["current"]["figures"][0];
    let recommended = &tuned["recommended"]["figures"][0];
    assert_eq!(
        current["gave_up"], 1.0,
        "three quick retries cannot outlast 10s: {tuned}"
    );
    assert!(tuned["recommended"]["within_bounds"].as_bool().unwrap());
    assert!(recommended["gave_up"].as_f64().unwrap() <= 0.01);

    assert!(
        !tuned["recommended"]["settings"].as_array().unwrap().is_empty(),
        "a policy that gives up on everyone is not kept: {tuned}"
    );
    let pasted = dir.path().join("tuned.yaml");
    std::fs::write(&pasted, paste(SHIPPED, &tuned)).unwrap();
    let pasted = pasted.to_str().unwrap();
    let check = stormguard(&["check", pasted]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    let wasted: Vec<f64> = ["1", "2"]
        .iter()
        .map(|seed| {
            let run: serde_json::Value = serde_json::from_str(&stdout(&stormguard(&[
                "simulate",
                "--policy",
                pasted,
                "--service",
                "orders",
                "--outage",
                "10s",
                "--seed",
                seed,
                "--json",
            ])))
            .unwrap();
            run["wasted"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(
        (wasted[0] + wasted[1]) / 2.0,
        recommended["wasted"].as_f64().unwrap(),
        "the pasted policy wastes what tune said it would"
    );
}

#[test]
fn the_text_report_sets_each_outage_side_by_side_and_the_picture_has_a_panel_each() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("tune.svg");
    let text = stdout(&stormguard(&[
        "tune",
        "--outages",
        "2s,10s",
        "--seeds",
        "1",
        "--without-gate",
        "--svg",
        svg.to_str().unwrap(),
    ]));
    for row in [
        "2s      current",
        "2s      recommended",
        "10s     current",
        "10s     recommended",
    ] {
        assert!(text.contains(row), "{row} in:\n{text}");
    }
    assert!(
        text.contains("as a policy file's defaults:\ndefaults:\n  jitter: "),
        "{text}"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(picture.matches("outage</text>").count(), 4, "{picture}");
}

#[test]
fn bad_input_is_named() {
    let missing = stormguard(&["tune", "--policy", "no/such/file.yaml", "--service", "x"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no/such/file.yaml"));

    let share = stormguard(&["tune", "--max-gave-up", "2"]);
    assert_eq!(share.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&share.stderr).contains("must be between 0 and 1"));

    let unitless = stormguard(&["tune", "--outages", "2s,10"]);
    assert_eq!(unitless.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unitless.stderr).contains("--outages"));
}

#[test]
fn the_files_forecast_block_sets_the_herd_unless_a_flag_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forecast.yaml");
    let yaml = format!(
        "{SHIPPED}forecast:\n  outages: [5s]\n  services:\n    orders: {{clients: 300, capacity: 50}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    let path = path.to_str().unwrap();
    let tune = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "tune",
            "--policy",
            path,
            "--service",
            "orders",
            "--seeds",
            "1",
            "--without-gate",
            "--json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&stdout(&stormguard(&args))).unwrap()
    };
    let from_file = tune(&[]);
    assert_eq!(
        (from_file["clients"].as_u64(), from_file["capacity"].as_u64()),
        (Some(300), Some(50))
    );
    assert_eq!(from_file["outages_seconds"], serde_json::json!([5.0]));
    let flagged = tune(&["--clients", "200", "--outages", "3s"]);
    assert_eq!(
        (flagged["clients"].as_u64(), flagged["capacity"].as_u64()),
        (Some(200), Some(50))
    );
    assert_eq!(flagged["outages_seconds"], serde_json::json!([3.0]));

    let fleet_only = dir.path().join("fleet-only.yaml");
    std::fs::write(&fleet_only, format!("{SHIPPED}forecast:\n  processes: 20\n")).unwrap();
    let args = [
        "tune",
        "--policy",
        fleet_only.to_str().unwrap(),
        "--service",
        "orders",
    ];
    let tuned: serde_json::Value = serde_json::from_str(&stdout(&stormguard(
        &[&args[..], &["--seeds", "1", "--without-gate", "--json"]].concat(),
    )))
    .unwrap();
    assert_eq!(
        tuned["outages_seconds"],
        serde_json::json!([2.0, 10.0, 60.0]),
        "a block that states no outages leaves tune's own family"
    );
    assert_eq!(tuned["processes"], 20);
}

#[test]
fn progress_shows_on_a_terminal_and_nowhere_else() {
    let binary = env!("CARGO_BIN_EXE_stormguard");
    let piped = stormguard(&["tune", "--outages", "2s", "--seeds", "1", "--without-gate"]);
    assert!(piped.status.success());
    assert!(
        piped.stderr.is_empty(),
        "nothing but the report when piped: {}",
        String::from_utf8_lossy(&piped.stderr)
    );
    // util-linux's `script` runs the command on a terminal of its own and
    // copies what it drew.
    let on_a_terminal = Command::new("script")
        .args([
            "-qfec",
            &format!("{binary} tune --outages 2s --seeds 1 --without-gate"),
            "/dev/null",
        ])
        .output()
        .expect("util-linux's script, to give tune a terminal");
    let drawn = String::from_utf8_lossy(&on_a_terminal.stdout);
    assert!(on_a_terminal.status.success(), "{drawn}");
    assert!(
        drawn.contains("policies (a grid of 200): the coarse grid"),
        "{drawn}"
    );
    assert!(
        drawn.contains("tune: the simulator's full-jitter herd"),
        "{drawn}"
    );
}

/// A file that states its fleet in a `forecast:` block, for a small herd
/// whose replicas share a pace store (as the shipped Deployment's should):
/// there the send gate is tune's recommendation.
const STATED_FLEET: &str =
    "defaults:\n  maxRetries: 3\n  initialDelay: 100ms\n  maxDelay: 10s\n  jitter: full\n\
services:\n  orders: {}\n\
forecast:\n  clients: 300\n  capacity: 60\n  outages: [10s]\n  processes: 10\n  paceStore: true\n  latency: 1ms\n";

#[test]
fn the_recommendation_pasted_under_a_stated_fleet_gives_tunes_figures_in_simulate_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = dir.path().join("shipped.yaml");
    std::fs::write(&shipped, STATED_FLEET).unwrap();
    let tuned: serde_json::Value = serde_json::from_str(&stdout(&stormguard(&[
        "tune",
        "--policy",
        shipped.to_str().unwrap(),
        "--service",
        "orders",
        "--seeds",
        "3",
        "--fresh-seed",
        "11",
        "--fresh-seeds",
        "4",
        "--json",
    ])))
    .unwrap();
    // What it says to expect: the figures on seeds its search never ran.
    let promised = &tuned["fresh"]["recommended"][0];
    let promised_wasted = promised["wasted"].as_f64().unwrap();
    let promised_p99 = promised["p99_seconds"].as_f64().unwrap();
    assert!(
        tuned["recommended"]["within_bounds"].as_bool().unwrap(),
        "{tuned}"
    );

    let pasted = dir.path().join("pasted.yaml");
    std::fs::write(&pasted, paste(STATED_FLEET, &tuned)).unwrap();
    let pasted = pasted.to_str().unwrap();

    // The seeds tune reported on and never searched on, and no shape flag:
    // the file's fleet alone.
    let runs: Vec<serde_json::Value> = ["11", "12", "13", "14"]
        .iter()
        .map(|seed| {
            let args = [
                "simulate",
                "--policy",
                pasted,
                "--service",
                "orders",
                "--seed",
                seed,
                "--json",
            ];
            serde_json::from_str(&stdout(&stormguard(&args))).unwrap()
        })
        .collect();
    let mean = |key: &str| runs.iter().map(|r| r[key].as_f64().unwrap()).sum::<f64>() / runs.len() as f64;
    assert_eq!(runs[0]["shape"], tuned["shape"], "the same fleet");
    assert!(
        (mean("wasted") - promised_wasted).abs() <= 1e-9 * promised_wasted,
        "simulate wastes {} on the fresh seeds, tune promised {promised_wasted}",
        mean("wasted")
    );
    assert!(
        (mean("p99_seconds") - promised_p99).abs() <= 1e-9 * promised_p99,
        "simulate's p99 {} on the fresh seeds, tune promised {promised_p99}",
        mean("p99_seconds")
    );
    assert!(
        runs.iter().all(|r| r["gave_up"].as_u64() <= Some(3)),
        "at most 1 % of 300 give up"
    );

    let check = stormguard(&["check", pasted]);
    let report = String::from_utf8_lossy(&check.stdout);
    let row: Vec<&str> = report
        .lines()
        .find(|line| line.starts_with("orders ") && line.ends_with("through the daemon"))
        .unwrap_or_else(|| panic!("the forecast of orders, paced: {report}"))
        .split_whitespace()
        .collect();
    let check_wasted: f64 = row[4].parse().unwrap();
    assert!(
        (check_wasted / promised_wasted - 1.0).abs() <= 0.10,
        "check forecasts {check_wasted}, tune promised {promised_wasted}: {report}"
    );
    assert!(
        report.contains(&format!("ran in: {}", tuned["shape"].as_str().unwrap())),
        "{report}"
    );
}
