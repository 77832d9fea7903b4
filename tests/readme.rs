//! The README's adoption examples are code the tests compile and run, line
//! for line: Rust's is the client crate's doc example (compiled by its doc
//! tests), Go's is `ExampleDependency_Transport` (run by `go test`).
//! Python's is run from the README itself by the Python client's tests.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The lines, trimmed, of the README's first `language` block that holds `marker`.
fn readme_block(language: &str, marker: &str) -> Vec<String> {
    let readme = read("README.md");
    let fence = format!("```{language}\n");
    readme
        .split(&fence)
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains(marker))
        .unwrap_or_else(|| panic!("no ```{language} block in the README holds {marker:?}"))
        .lines()
        .map(|line| line.trim().to_owned())
        .collect()
}

/// Whether `block` is a run of consecutive lines of `source` (both trimmed).
fn holds(source: &[String], block: &[String]) -> bool {
    source.windows(block.len()).any(|window| window == block)
}

#[test]
fn the_rust_adoption_example_is_the_client_crates_first_doc_example() {
    let block = readme_block("rust", "Stormguard::start");
    assert!(block.len() < 12, "a few lines: {block:?}");
    let docs: Vec<String> = read("crates/client/src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.trim().to_owned())
        .filter(|line| !line.starts_with("# "))
        .collect();
    assert!(
        holds(&docs, &block),
        "the README's Rust example differs from crates/client/src/lib.rs's:\n{}",
        block.join("\n")
    );
}

#[test]
fn the_go_adoption_example_is_the_one_go_test_runs() {
    let block = readme_block("go", "Transport(nil)");
    let example: Vec<String> = read("clients/go/dependency/example_test.go")
        .lines()
        .map(|line| line.trim().to_owned())
        .collect();
    assert!(
        holds(&example, &block),
        "the README's Go example differs from ExampleDependency_Transport:\n{}",
        block.join("\n")
    );
}
