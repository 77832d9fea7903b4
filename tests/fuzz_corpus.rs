//! Replays every input the fuzzers keep (`fuzz/corpus/<target>/`), through
//! the same functions the fuzz targets call, so that CI guards every input a
//! fuzzer ever found without needing nightly or cargo-fuzz.

use stormguard::fuzzing;

fn replay(target: &str, run: fn(&[u8])) -> usize {
    let dir = format!("fuzz/corpus/{target}");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} panics", path.display());
        count += 1;
    }
    count
}

#[test]
fn the_policy_loader_corpus_replays_cleanly() {
    assert!(replay("policy_loader", fuzzing::policy_loader) >= 80);
}

#[test]
fn the_duration_corpus_replays_cleanly() {
    assert!(replay("duration", fuzzing::duration) >= 10);
}

#[test]
fn the_retry_after_corpus_replays_cleanly() {
    assert!(replay("retry_after", fuzzing::retry_after) >= 5);
}

#[test]
fn the_report_corpus_replays_cleanly() {
    assert!(replay("report", fuzzing::report) >= 4);
}
