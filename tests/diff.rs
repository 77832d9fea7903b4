//! `stormguard diff` end to end: the real binary on pairs of policy files,
//! and on a file against a running daemon, over HTTP and HTTPS; its text,
//! its JSON and the exit codes a pipeline gates on.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::certs::Ca;
use common::{ConfigMapDir, Daemon};

fn files(old: &str, new: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("old.yaml"), dir.path().join("new.yaml"));
    std::fs::write(&a, old).unwrap();
    std::fs::write(&b, new).unwrap();
    (dir, a, b)
}

fn diff(old: &str, new: &str, extra: &[&str]) -> Output {
    let (_dir, a, b) = files(old, new);
    run_diff(a.as_ref(), b.as_ref(), extra)
}

fn run_diff(old: &std::ffi::OsStr, new: &std::ffi::OsStr, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("diff")
        .args([old, new])
        .args(extra)
        .output()
        .expect("the stormguard binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
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

#[test]
fn a_file_against_the_running_daemon_shows_what_applying_it_changes() {
    let live = ConfigMapDir::new(BASE);
    let daemon = Daemon::start(&live.policy(), &[]);
    let edited = BASE.replace("    initialDelay: 50ms\n", "    initialDelay: 80ms\n");
    let (_dir, _, file) = files(BASE, &edited);
    let out = run_diff(daemon.base.as_ref(), file.as_ref(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = stdout.lines().filter(|l| !l.contains("forecast")).collect();
    assert_eq!(keys, ["inventory", "  initialDelay: 50ms -> 80ms (override)"]);

    let (_dir, same, _) = files(BASE, BASE);
    let unchanged = run_diff(same.as_ref(), daemon.url("/").as_ref(), &[]);
    assert_eq!(
        (
            unchanged.status.code(),
            String::from_utf8_lossy(&unchanged.stdout).as_ref()
        ),
        (Some(0), "no service's resolved policy changes\n"),
        "the daemon serves the file: {}",
        text(&unchanged)
    );
}

#[test]
fn a_daemon_that_cannot_be_read_is_named_and_exits_1() {
    let (_dir, file, _) = files(BASE, BASE);
    let reserved = common::Reserved::new();
    let address = reserved.address();
    let down = run_diff(format!("http://{address}").as_ref(), file.as_ref(), &[]);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        text(&down).contains(&format!("GET http://{address}/v1/policies")),
        "{}",
        text(&down)
    );
    let live = ConfigMapDir::new(BASE);
    let daemon = Daemon::start(&live.policy(), &[]);
    let not_policies = run_diff(daemon.url("/healthz").as_ref(), file.as_ref(), &[]);
    assert_eq!(not_policies.status.code(), Some(1), "{}", text(&not_policies));
}

#[test]
fn an_https_daemon_is_read_with_its_ca_and_refused_without_it() {
    let ca = Ca::new("stormguard diff test CA");
    let server = ca.server();
    let secret = ConfigMapDir::with_files(&[
        ("tls.crt", &server.cert),
        ("tls.key", &server.key),
        ("ca.crt", &ca.pem()),
    ]);
    let live = ConfigMapDir::new(BASE);
    let [cert, key, ca_file] =
        ["tls.crt", "tls.key", "ca.crt"].map(|f| secret.root().join(f).display().to_string());
    let daemon = Daemon::start(&live.policy(), &["--tls-cert", &cert, "--tls-key", &key]);
    let port = daemon.base.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}");
    let (_dir, file, _) = files(BASE, BASE);
    let trusted = run_diff(url.as_ref(), file.as_ref(), &["--ca-file", &ca_file]);
    assert_eq!(trusted.status.code(), Some(0), "{}", text(&trusted));
    let untrusted = run_diff(url.as_ref(), file.as_ref(), &[]);
    assert_eq!(
        untrusted.status.code(),
        Some(1),
        "a private CA is not a public one"
    );
    let missing = run_diff(url.as_ref(), file.as_ref(), &["--ca-file", "/nonexistent/ca.crt"]);
    assert!(
        text(&missing).contains("--ca-file /nonexistent/ca.crt"),
        "{}",
        text(&missing)
    );
}
