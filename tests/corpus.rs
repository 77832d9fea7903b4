//! The bad-input corpus: every way a policy file can be wrong, each with the
//! error it must get (`tests/fixtures/bad/NAME.expect`: the diagnostic after
//! the file name), through the loader and through `stormguard check`; and
//! the good corpus of edge cases that must load.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use stormguard_toolkit::policy::{load_bytes, LoadLimits, DEFAULT_MAX_POLICY_BYTES};

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(format!("tests/fixtures/{dir}"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// `stormguard check PATH`, killed if it runs past 20 s (a hang is a failure, not a wait).
fn check(path: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("check")
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("stormguard check {} did not finish", path.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn every_bad_file_gets_its_error_from_the_loader() {
    let bad = fixtures("bad");
    assert!(bad.len() >= 60, "{} bad fixtures", bad.len());
    for path in bad {
        let name = path.display().to_string();
        let expected = std::fs::read_to_string(path.with_extension("expect"))
            .unwrap_or_else(|_| panic!("{name} has no .expect file"));
        let bytes = std::fs::read(&path).unwrap();
        let errors = load_bytes(&name, &bytes, LoadLimits::default()).expect_err(&name);
        assert_eq!(format!("{}\n", errors[0]), format!("{name}{expected}"), "{name}");
    }
}

#[test]
fn every_bad_file_fails_check_with_its_error_shown() {
    for path in fixtures("bad") {
        let expected = std::fs::read_to_string(path.with_extension("expect")).unwrap();
        let out = check(&path);
        assert_eq!(out.status.code(), Some(1), "{}", path.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(expected.trim_end()),
            "{}:\n{stderr}",
            path.display()
        );
        assert!(!stderr.contains("panicked"), "{}", path.display());
    }
}

#[test]
fn deep_nesting_and_oversized_files_are_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!("defaults: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let out = check(&deep);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-flow-collections"));

    let big = dir.path().join("big.yaml");
    let mut text = String::from("defaults:\n  maxRetries: 2\n");
    while text.len() <= DEFAULT_MAX_POLICY_BYTES {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, text).unwrap();
    let out = check(&big);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-policy-bytes"));
}

#[test]
fn every_good_file_loads_and_passes_check() {
    let mut good = fixtures("good");
    assert!(good.len() >= 10);
    good.push(PathBuf::from("policies/full-example.yaml"));
    good.push(PathBuf::from("policies/retry-policy.yaml"));
    for path in good {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.display().to_string();
        if let Err(errors) = load_bytes(&name, &bytes, LoadLimits::default()) {
            panic!(
                "{name}: {}",
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let out = check(&path);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn edge_cases_mean_what_they_say() {
    let load = |name: &str| {
        let path = format!("tests/fixtures/good/{name}");
        load_bytes(&path, &std::fs::read(&path).unwrap(), LoadLimits::default()).unwrap()
    };
    let overrides = load("empty-and-null-overrides.yaml");
    for service in ["a", "b", "c", "d"] {
        let resolved = overrides.resolve(service);
        assert_eq!(resolved.policy.max_retries, 2, "{service} inherits the defaults");
        assert!(resolved.overridden.is_empty());
    }
    assert_eq!(
        load("crlf-line-ends.yaml").resolve("orders").policy.max_retries,
        2
    );
    assert_eq!(load("utf-8-bom.yaml").defaults_policy().max_retries, 2);
    let merged = load("anchors-and-merge-keys.yaml");
    assert_eq!(
        merged.resolve("b").policy.max_retries,
        4,
        "an explicit key wins over the merge"
    );
    assert_eq!(
        merged.resolve("b").policy.initial_delay,
        Duration::from_millis(50)
    );
}
