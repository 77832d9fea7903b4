//! `stormguard simulate` end to end: the real binary, its flags and outputs.

use std::process::{Command, Output};

use serde_json::json;

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("the stormguard binary runs")
}

/// The `strategy` of each run in a JSON array of runs.
fn strategy_names(runs: &serde_json::Value) -> Vec<String> {
    runs.as_array()
        .expect("an array: one object per run")
        .iter()
        .map(|r| r["strategy"].as_str().unwrap().to_string())
        .collect()
}

/// `simulate args` exits `code` and its stderr says `says`.
fn refused_with(args: &[&str], code: i32, says: &str) {
    let refused = simulate(args);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "simulate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn compare_json_carries_the_contract_keys_for_each_strategy() {
    let out = stdout(&simulate(&[
        "--compare",
        "--strategy",
        "exponential",
        "--strategy",
        "full-jitter",
        "--json",
    ]));
    let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
    let runs = runs.as_array().expect("an array with --compare");
    assert_eq!(runs.len(), 2);
    for key in [
        "strategy",
        "clients",
        "total_requests",
        "accepted",
        "wasted",
        "wasted_during_outage",
        "over_capacity",
        "p50_seconds",
        "p99_seconds",
        "max_seconds",
        "last_success_seconds",
        "gave_up",
        "requests_per_second",
        "accepted_per_second",
    ] {
        assert!(runs.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    assert_eq!(runs[0]["strategy"], "exponential");
    assert_eq!(runs[0]["wasted"], 9000);
    assert_eq!(runs[1]["clients"], 1000);
}

#[test]
fn one_strategy_prints_the_histogram_and_summary_and_a_seed_repeats_it() {
    let args = [
        "--strategy",
        "decorrelated-jitter",
        "--clients",
        "300",
        "--capacity",
        "60",
        "--seed",
        "9",
    ];
    let first = stdout(&simulate(&args));
    assert!(first.contains("decorrelated-jitter: requests per second"));
    assert!(first.contains("    0s "), "a row per second");
    assert!(first.contains("wasted (rejected)"));
    assert_eq!(first, stdout(&simulate(&args)), "same seed, same output");
}

#[test]
fn svg_draws_a_panel_per_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("herd.svg");
    let out = stdout(&simulate(&[
        "--compare",
        "--strategy",
        "exponential",
        "--strategy",
        "equal-jitter",
        "--svg",
        svg.to_str().unwrap(),
    ]));
    assert!(
        out.contains("strategy") && out.contains("equal-jitter"),
        "the table"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg"));
    assert!(drawn.contains(">exponential</text>") && drawn.contains(">equal-jitter</text>"));
}

#[test]
fn a_service_policy_from_a_file_is_simulated() {
    let out = stdout(&simulate(&[
        "--policy",
        "policies/retry-policy.yaml",
        "--service",
        "payment-service",
        "--json",
    ]));
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["strategy"], "payment-service");
    // maxRetries 2 within a 10 s outage: every client gives up.
    assert_eq!(run["gave_up"], 1000);
    assert_eq!(run["total_requests"], 3000);
}

#[test]
fn compare_with_a_policy_sets_it_beside_every_named_strategy() {
    let out = stdout(&simulate(&[
        "--compare",
        "--policy",
        "policies/retry-policy.yaml",
        "--service",
        "inventory-service",
        "--clients",
        "100",
        "--capacity",
        "20",
        "--json",
    ]));
    let names = strategy_names(&serde_json::from_str(&out).unwrap());
    assert_eq!(names.len(), 8, "{names:?}");
    assert_eq!(names[0], "constant");
    assert_eq!(names[7], "inventory-service");
}

#[test]
fn bad_input_is_named() {
    let missing = simulate(&["--policy", "no/such/file.yaml", "--service", "x"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no/such/file.yaml"));

    let bad_name = simulate(&[
        "--policy",
        "policies/retry-policy.yaml",
        "--service",
        "Not_A_Label",
    ]);
    assert_eq!(bad_name.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad_name.stderr).contains("Not_A_Label"));

    let unknown = simulate(&["--strategy", "fibonacci"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("full-jitter"),
        "lists the valid names"
    );

    let bad_duration = simulate(&["--outage", "10"]);
    assert_eq!(bad_duration.status.code(), Some(2));
}

#[test]
fn json_with_several_strategies_and_no_compare_prints_every_run() {
    let out = stdout(&simulate(&[
        "--strategy",
        "exponential",
        "--strategy",
        "full-jitter",
        "--clients",
        "50",
        "--capacity",
        "20",
        "--json",
    ]));
    let names = strategy_names(&serde_json::from_str(&out).unwrap());
    assert_eq!(names, ["exponential", "full-jitter"]);
}

#[test]
fn store_faults_without_a_shared_store_are_refused_naming_the_flags() {
    for flag in ["--store-lost-at", "--store-restarted-at"] {
        refused_with(
            &["--fleet", "--replicas", "2", flag, "11s"],
            1,
            "the replicas share no pace store",
        );
    }
    refused_with(
        &["--fleet", "--replicas-restart-at", "100000h"],
        2,
        "--replicas-restart-at",
    );
}

#[test]
fn out_of_range_scenarios_are_refused_with_the_flag_and_range() {
    for (flag, value) in [
        ("--horizon", "100000h"),
        ("--spread", "100000h"),
        ("--clients", "0"),
    ] {
        let output = simulate(&[flag, value]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("must be between"),
            "{stderr}"
        );
    }
}

#[test]
fn compare_puts_gates_and_fleet_pacing_beside_each_strategy_with_the_same_keys() {
    let out = stdout(&simulate(&[
        "--compare",
        "--strategy",
        "full-jitter",
        "--gate",
        "--fleet",
        "--processes",
        "50",
        // One daemon and no latency: the shape where one rate for the fleet
        // beats a gate per process on waste too (with 1ms, they waste about
        // the same and the fleet's gain is its p99).
        "--replicas",
        "1",
        "--latency",
        "0s",
        "--json",
    ]));
    let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        strategy_names(&runs),
        ["full-jitter", "full-jitter+gate", "full-jitter+fleet"]
    );
    let runs = runs.as_array().unwrap();
    for key in [
        "wasted",
        "p99_seconds",
        "gave_up",
        "gave_up_no_turn",
        "half_open_trials",
        "half_open_trials_per_window",
    ] {
        assert!(runs.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    let wasted: Vec<u64> = runs.iter().map(|r| r["wasted"].as_u64().unwrap()).collect();
    assert!(wasted[1] * 5 < wasted[0], "{wasted:?}");
    // Over a few seeds (one seed's refusals after the outage vary by a
    // hundred either way), the fleet recovers no later than a gate per
    // process. As shipped (`overloadWhen: evidence`) its slow start goes on
    // past refusals a random share would explain, so that a dependency back
    // from an outage that also fails a tenth at random is not cut far
    // below its capacity; against a bare capacity that costs refusals
    // after the outage (seeds 1-5: 864 a herd against the gates' 631,
    // where under any-refusal the fleet wasted less).
    let mut totals = [0, 0];
    let mut p99s = [0.0, 0.0];
    for seed in ["1", "2", "3", "4", "5"] {
        let runs: serde_json::Value = serde_json::from_str(&stdout(&simulate(&[
            "--compare",
            "--strategy",
            "full-jitter",
            "--gate",
            "--fleet",
            "--processes",
            "50",
            "--replicas",
            "1",
            "--latency",
            "0s",
            "--seed",
            seed,
            "--json",
        ])))
        .unwrap();
        totals[0] += runs[1]["wasted"].as_u64().unwrap();
        totals[1] += runs[2]["wasted"].as_u64().unwrap();
        p99s[0] += runs[1]["p99_seconds"].as_f64().unwrap();
        p99s[1] += runs[2]["p99_seconds"].as_f64().unwrap();
    }
    assert!(p99s[1] <= p99s[0], "gates, fleet: {p99s:?}");
    assert!(2 * totals[1] < 3 * totals[0], "gates, fleet: {totals:?}");
}

#[test]
fn a_second_outage_and_a_brownout_are_set_and_checked() {
    let out = stdout(&simulate(&[
        "--clients",
        "3000",
        "--spread",
        "30s",
        "--outage",
        "0s",
        "--second-outage",
        "10s:5s",
        "--brownout",
        "20s:5s:20",
        "--json",
    ]));
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    let accepted = |second: usize| run["accepted_per_second"][second].as_u64().unwrap();
    assert!((10..15).all(|s| accepted(s) == 0), "{run}");
    assert!((20..25).all(|s| accepted(s) <= 20), "{run}");
    assert!(accepted(5) > 20 && accepted(26) > 20, "{run}");
    let refused = simulate(&["--brownout", "20s:5s"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("START:LASTING:CAPACITY"));
}

#[test]
fn the_collapse_scenario_reports_goodput_per_second() {
    let out = stdout(&simulate(&["--scenario", "collapse", "--seed", "2", "--json"]));
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["strategy"], "immediate+max2");
    let goodput: Vec<u64> = run["goodput_per_second"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(
        goodput[5..15].iter().all(|g| (25..=60).contains(g)),
        "{goodput:?}"
    );
    assert!(
        goodput.iter().skip(40).all(|g| *g == 0),
        "collapsed long after the spike: {goodput:?}"
    );
    for series in ["goodput_per_second", "requests_per_second", "accepted_per_second"] {
        assert_eq!(
            run[series].as_array().unwrap().len(),
            80,
            "{series} covers the scenario's 80 s, the collapse's zeros included"
        );
    }
    assert_eq!(run["scenario"], "collapse");
    assert_eq!(run["collapse"]["until_seconds"], 80.0);
    assert_eq!(run["collapse"]["spike_calls_per_second"], 80.0);
    assert_eq!(run["capacity"], serde_json::Value::Null, "no herd's capacity");
}

#[test]
fn the_collapse_header_names_its_own_settings_and_a_gate_per_call() {
    let text = stdout(&simulate(&[
        "--scenario",
        "collapse",
        "--compare",
        "--strategy",
        "immediate",
        "--gate",
        "--processes",
        "0",
    ]));
    let header = text.lines().next().unwrap();
    assert!(
        header.contains("from a process per call (each with its own gate, budget and breaker)"),
        "{header}"
    );
    assert!(
        header.contains("collapse: calls arrive at 40/s, at 80/s from 20s for 5s, until 1m20s"),
        "{header}"
    );
    assert!(
        !header.contains("capacity") && !header.contains("outage"),
        "not the herd's header: {header}"
    );
    let herd = stdout(&simulate(&["--strategy", "exponential"]));
    assert!(
        herd.starts_with("scenario: 1000 calls from 50 processes"),
        "{herd}"
    );
    assert!(
        herd.lines()
            .next()
            .unwrap()
            .contains("1ms latency, against a quota of 200 a second; outage 10s"),
        "{herd}"
    );
}

/// A file whose `forecast:` block states its fleet, with a gated service.
const STATED: &str = "defaults:\n  maxRetries: 20\n  maxElapsed: 60s\nservices:\n  orders:\n    gate: {enabled: true}\n\
forecast:\n  clients: 200\n  outages: [4s]\n  processes: 20\n  replicas: 3\n  paceStore: true\n  latency: 5ms\n";

#[test]
fn check_simulate_and_tune_run_the_fleet_the_file_states_and_say_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stated.yaml");
    std::fs::write(&path, STATED).unwrap();
    let path = path.to_str().unwrap();
    let stated = "200 calls from 20 processes through 3 daemon replicas sharing a pace store, 5ms latency, \
                  against a quota of 200 a second";

    let check = command_stdout(&["check", path]);
    assert!(check.contains(&format!("ran in: {stated}\n")), "{check}");
    let text = stdout(&simulate(&["--policy", path, "--service", "orders"]));
    assert!(
        text.starts_with(&format!("scenario: {stated}; outage 4s")),
        "{text}"
    );
    let run: serde_json::Value = serde_json::from_str(&stdout(&simulate(&[
        "--policy",
        path,
        "--service",
        "orders",
        "--json",
    ])))
    .unwrap();
    assert_eq!(run["shape"], stated);
    assert_eq!(
        run["strategy"], "orders+fleet",
        "a gated policy paces through the daemon"
    );
    assert_eq!(
        (
            &run["processes"],
            &run["replicas"],
            &run["pace_store"],
            &run["latency_seconds"]
        ),
        (&json!(20), &json!(3), &json!(true), &json!(0.005))
    );
    let tune: serde_json::Value = serde_json::from_str(&command_stdout(&[
        "tune",
        "--policy",
        path,
        "--service",
        "orders",
        "--seeds",
        "1",
        "--json",
    ]))
    .unwrap();
    assert_eq!(tune["shape"], stated);

    let flagged = [
        "--replicas",
        "1",
        "--pace-store=false",
        "--processes",
        "0",
        "--latency",
        "0s",
        "--dependency",
        "token-bucket",
        "--burst",
        "50",
    ];
    let overridden =
        "200 calls from a process per call (each with its own gate, budget and breaker) through 1 daemon, \
                      0s latency, against a token bucket of 200/s, burst 50";
    let check = command_stdout(&[&["check", path][..], &flagged].concat());
    assert!(check.contains(&format!("ran in: {overridden}\n")), "{check}");
    let run: serde_json::Value = serde_json::from_str(&stdout(&simulate(
        &[&["--policy", path, "--service", "orders", "--json"][..], &flagged].concat(),
    )))
    .unwrap();
    assert_eq!(run["shape"], overridden);
}

/// The stdout of another stormguard command, which must succeed.
fn command_stdout(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(args)
        .output()
        .expect("the stormguard binary runs");
    assert!(
        output.status.success() && !output.stdout.is_empty(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The amplification of `simulate --scenario errors` at 200 first tries a
/// second, 50 % errors, with `extra` flags; and the run's JSON.
fn errors_run(extra: &[&str]) -> (f64, serde_json::Value) {
    let args = [&["--scenario", "errors", "--rate", "200", "--json"][..], extra].concat();
    let run: serde_json::Value = serde_json::from_str(&stdout(&simulate(&args))).unwrap();
    (run["amplification"].as_f64().unwrap(), run)
}

#[test]
fn the_errors_scenario_shows_per_process_budgets_binding_for_one_process_and_never_for_many() {
    let (unbudgeted, run) = errors_run(&["--processes", "200"]);
    assert!(
        (unbudgeted - 1.875).abs() < 0.02,
        "1 + .5 + .25 + .125 with 3 retries: {unbudgeted}"
    );
    assert_eq!(run["scenario"], "errors");
    assert_eq!(run["errors"]["calls_per_second"], 200.0);
    assert_eq!(run["errors"]["error_rate"], 0.5);
    assert_eq!(run["capacity"], serde_json::Value::Null);
    assert_eq!(
        run["requests_per_second"].as_array().unwrap().len(),
        61,
        "the minute of arrivals, and the last retries"
    );
    let retries = run["retries_per_second"].as_f64().unwrap();
    assert!((retries - 200.0 * 0.875).abs() < 5.0, "{retries}");

    let (one, _) = errors_run(&["--processes", "1", "--budget"]);
    assert!((one - 1.25).abs() < 0.02, "20 % and 10 a second of 200: {one}");
    let (many, _) = errors_run(&["--processes", "200", "--budget"]);
    assert!(
        (many - unbudgeted).abs() < 0.01,
        "200 floors of 10 a second never bind: {many} against {unbudgeted}"
    );

    let (fleet, run) = errors_run(&["--processes", "200", "--fleet-budget", "--pace-store"]);
    assert_eq!(run["strategy"], "full-jitter+fleet-budget+max3");
    assert!(
        fleet <= one * 1.10,
        "one floor for the fleet, divided by the daemon: {fleet} against one process's {one}"
    );
    let requests: Vec<f64> = run["requests_per_second"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect();
    let settled = requests[11..60].iter().sum::<f64>() / (49.0 * 200.0);
    assert!(
        (settled / one - 1.0).abs() < 0.05,
        "once every process has its part the fleet retries as one process: {settled} against {one}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    let text = "defaults:\n  maxRetries: 3\nservices:\n  ledger:\n    budget:\n      scope: fleet\n";
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let stated = [
        "--processes",
        "200",
        "--pace-store",
        "--policy",
        file,
        "--service",
        "ledger",
    ];
    let (from_file, _) = errors_run(&stated);
    assert!(
        (from_file / fleet - 1.0).abs() < 0.01,
        "a file's fleet-scoped budget is divided as --fleet-budget's (its backoff is the file's): {from_file} against {fleet}"
    );
    let (alone, _) = errors_run(&["--processes", "200", "--fleet-budget"]);
    assert!(
        fleet < alone && alone < many,
        "two replicas without a store each divide a whole floor: {alone}, between {fleet} and {many}"
    );

    let misplaced = simulate(&["--rate", "200"]);
    assert_eq!(misplaced.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&misplaced.stderr).contains("--scenario errors"));
}

#[test]
fn the_mixed_and_partial_worlds_are_stated_and_their_bad_settings_refused() {
    let world = ["--error-rate", "0.1", "--backends", "4", "--down", "1"];
    let mixed: serde_json::Value =
        serde_json::from_str(&stdout(&simulate(&[&world[..], &["--json"]].concat()))).unwrap();
    assert_eq!(mixed["random_failures"], 0.1);
    assert_eq!(mixed["backends"], json!({"count": 4, "down": 1}));
    assert_eq!(mixed["served_share"], 1.0, "retried until success");
    let text = stdout(&simulate(&world));
    assert!(
        text.contains("10% of requests fail at random")
            && text.contains("1 of 4 backends behind a round-robin balancer are down"),
        "{text}"
    );
    for (args, says) in [
        (
            &["--backends", "3", "--down", "3"][..],
            "--down 3: must be fewer than --backends 3",
        ),
        (
            &["--scenario", "collapse", "--error-rate", "0.1"][..],
            "--error-rate: not with --scenario collapse",
        ),
        (
            &["--scenario", "collapse", "--backends", "2"][..],
            "--backends: not with --scenario collapse",
        ),
    ] {
        refused_with(args, 1, says);
    }
    let orphan = simulate(&["--down", "1"]);
    assert_eq!(orphan.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&orphan.stderr).contains("--backends"));
}

#[test]
fn a_run_not_paced_through_the_daemon_does_not_say_it_ran_through_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stated.yaml");
    std::fs::write(&path, STATED).unwrap();
    let path = path.to_str().unwrap();
    let alone = "200 calls from 20 processes (not paced through a daemon), 5ms latency, against a quota of 200 a second";
    let unpaced = ["--policy", path, "--service", "orders", "--no-fleet-pacing"];
    let text = stdout(&simulate(&unpaced));
    assert!(text.starts_with(&format!("scenario: {alone}; ")), "{text}");
    let json = stdout(&simulate(&[&unpaced[..], &["--json"]].concat()));
    let run: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(run["shape"], alone);
    assert_eq!(run["strategy"], "orders", "{run}");

    // Compared, the runs share the world the file states; each says how it ran.
    let compared = stdout(&simulate(&[
        "--policy",
        path,
        "--service",
        "orders",
        "--compare",
        "--json",
    ]));
    let runs: serde_json::Value = serde_json::from_str(&compared).unwrap();
    let shapes: Vec<_> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["shape"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        shapes.iter().any(|s| s.contains("through 3 daemon replicas")),
        "{shapes:?}"
    );
}

fn herd_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(&simulate(&[args, &["--json"]].concat()))).unwrap()
}

#[test]
fn a_token_bucket_takes_its_burst_then_its_rate_and_a_quota_takes_a_second_at_once() {
    let busiest = |args: &[&str]| {
        let run = herd_json(&[&["--processes", "0", "--strategy", "constant"][..], args].concat());
        let accepted = run["accepted_per_second"].as_array().unwrap().iter();
        let most = accepted.map(|n| n.as_u64().unwrap()).max().unwrap();
        (most, run)
    };
    let (quota, _) = busiest(&[]);
    assert_eq!(quota, 200, "a quota takes 200 in a second, no more");
    let (full, _) = busiest(&["--dependency", "token-bucket"]);
    assert!(
        (201..=400).contains(&full),
        "a full bucket of 200 and a second's refill: {full}"
    );
    let (small, bucket) = busiest(&["--dependency", "token-bucket", "--burst", "20"]);
    assert!((200..=220).contains(&small), "{small}");
    assert!(
        bucket["shape"]
            .as_str()
            .unwrap()
            .ends_with("against a token bucket of 200/s, burst 20"),
        "{}",
        bucket["shape"]
    );
    // From full at 10 s: 20 at once, then one every 5 ms; the 1000th no sooner than 14.9 s.
    let last = bucket["last_success_seconds"].as_f64().unwrap();
    assert!(last >= 14.9, "{last}");
    assert_eq!(bucket["succeeded"], 1000);
}

#[test]
fn workers_with_a_long_queue_slow_callers_past_their_timeouts_and_their_work_is_wasted() {
    // 10 workers at 200/s (50 ms a request) and a queue of 1,000: the last
    // in line waits 5 s, past a 500 ms timeout.
    let slow = [
        "--dependency",
        "concurrency",
        "--workers",
        "10",
        "--queue",
        "1000",
    ];
    let timed = herd_json(
        &[
            &slow[..],
            &[
                "--outage",
                "0s",
                "--per-try-timeout",
                "500ms",
                "--max-retries",
                "3",
            ],
        ]
        .concat(),
    );
    assert!(
        timed["shape"]
            .as_str()
            .unwrap()
            .ends_with("against 10 workers at 50ms a request, queue 1000"),
        "{}",
        timed["shape"]
    );
    let accepted = timed["accepted_per_second"].as_array().unwrap();
    assert!(
        accepted.iter().all(|n| n.as_u64().unwrap() <= 200),
        "{accepted:?}"
    );
    assert!(timed["gave_up_exhausted"].as_u64().unwrap() > 0, "{timed}");
    let wasted = timed["wasted"].as_u64().unwrap();
    assert!(wasted > 1000, "timed out in line, some more than once: {timed}");
    let no_queue = herd_json(&["--dependency", "concurrency", "--workers", "10", "--queue", "0"]);
    assert_eq!(
        no_queue["succeeded"], 1000,
        "refused at once, retried until served"
    );
}

#[test]
fn a_dependency_model_is_checked_and_never_goes_with_a_collapse() {
    for (args, code, says) in [
        (
            &["--dependency", "token_bucket"][..],
            2,
            "quota, token-bucket, concurrency, request-rate",
        ),
        (
            &["--dependency", "concurrency", "--workers", "0"][..],
            2,
            "--workers",
        ),
        (
            &["--scenario", "collapse", "--burst", "5"][..],
            1,
            "not with --scenario collapse",
        ),
        (
            &["--scenario", "collapse", "--capacity", "50"][..],
            1,
            "not with --scenario collapse",
        ),
        (&["--until", "30s"][..], 1, "only with --scenario errors"),
    ] {
        refused_with(args, code, says);
    }
}

#[test]
fn check_forecasts_on_the_dependency_the_file_states() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.yaml");
    std::fs::write(
        &path,
        "defaults: {maxRetries: 5}\nforecast:\n  dependency: concurrency\n  workers: 8\n  queue: 0\n",
    )
    .unwrap();
    let check = command_stdout(&["check", path.to_str().unwrap()]);
    assert!(
        check.contains("against 8 workers at 40ms a request, queue 0"),
        "{check}"
    );
    std::fs::write(&path, "forecast:\n  dependency: bucket\n").unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr) + String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("forecast.dependency") && stderr.contains("unknown dependency \"bucket\""),
        "{stderr}"
    );
}

#[test]
fn calls_arriving_through_an_outage_show_every_processs_breaker_probing_its_return() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let args = [
            &[
                "--scenario",
                "errors",
                "--error-rate",
                "0",
                "--rate",
                "400",
                "--processes",
                "20",
                "--breaker",
                "--latency",
                "1ms",
                "--json",
            ][..],
            extra,
        ]
        .concat();
        serde_json::from_str(&stdout(&simulate(&args))).unwrap()
    };
    // Down for 20 s, answering 503: each of the 20 breakers trips
    // half-open at once (a 503 says overloaded or down), sends a trial a
    // second for ten seconds, finds none accepted and opens; 30 s later,
    // 40 s in, the default successThreshold of 3 accepted trials close it.
    let outage = run(&["--outage", "20s"]);
    assert_eq!(outage["outage_seconds"], 20.0);
    let trials = outage["half_open_trials"].as_u64().unwrap();
    assert!(
        (20 * 13..=20 * 15).contains(&trials),
        "about ten refused and three accepted each: {trials}"
    );
    let closed = outage["breakers_closed_seconds"].as_f64().unwrap();
    assert!(
        (20.0..21.0).contains(&closed),
        "closed at the second half-open, 40 s in, 20 s after the outage ended: {closed}"
    );
    let long = run(&["--outage", "40s"]);
    let closed = long["breakers_closed_seconds"].as_f64().unwrap();
    assert!(
        (0.0..1.0).contains(&closed),
        "half-open again 40 s in, as the dependency came back: {closed}"
    );
    let healthy = run(&[]);
    assert_eq!(
        healthy["half_open_trials"], 0,
        "no outage by default: no breaker opens"
    );
}

#[test]
fn calls_arriving_at_a_limited_dependency_meet_a_half_open_herd_of_every_processs_trials() {
    // The fleet of the half-open herd: 1,000 calls a second from 200
    // processes, down for 40 s, then 200 a second, by any model.
    for model in ["quota", "token-bucket"] {
        let out = stdout(&simulate(&[
            "--scenario",
            "errors",
            "--error-rate",
            "0",
            "--rate",
            "1000",
            "--processes",
            "200",
            "--outage",
            "40s",
            "--until",
            "80s",
            "--capacity",
            "200",
            "--dependency",
            model,
            "--breaker",
            "--latency",
            "1ms",
            "--json",
        ]));
        let run: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(run["capacity"], 200, "{model}");
        assert_eq!(run["errors"]["limited"], true);
        assert_eq!(run["errors"]["until_seconds"], 80.0);
        let per_window = run["half_open_trials_per_window"].as_u64().unwrap();
        assert!(
            per_window >= 200,
            "{model}: every process's breaker probes within one openTimeout: {per_window}"
        );
        assert!(
            run["wasted_after_outage"].as_u64().unwrap() > 0,
            "{model}: the trials and the calls that follow them meet a capacity of 200"
        );
    }
}

#[test]
fn class_shares_are_checked_and_reported_by_class() {
    refused_with(
        &["--scenario", "errors", "--critical", "0.7", "--sheddable", "0.5"],
        1,
        "--critical 0.7 and --sheddable 0.5: the shares add up to more than every call",
    );
    refused_with(&["--critical", "0.3"], 1, "only with --scenario errors");
    refused_with(&["--scenario", "errors", "--critical", "1.5"], 2, "--critical");
    let (_, run) = errors_run(&["--critical", "0.3", "--sheddable", "0.3", "--until", "10s"]);
    let classes: Vec<&str> = run["classes"]
        .as_array()
        .expect("a class block when calls name classes")
        .iter()
        .map(|c| c["class"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["critical", "default", "sheddable"]);
    let (_, unclassed) = errors_run(&["--until", "10s"]);
    assert!(
        unclassed["classes"].is_null(),
        "no class named: {}",
        unclassed["classes"]
    );
}
