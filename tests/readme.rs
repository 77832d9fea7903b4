//! The README's adoption examples are code the tests compile and run, line
//! for line: Rust's is the client crate's doc example (compiled by its doc
//! tests), Go's is `ExampleDependency_Transport` (run by `go test`).
//! Python's is run from the README itself by the Python client's tests.
//! `docs/adopt-a-client.md` shows the same three. The README and the pages
//! in `docs/` are held to what exists: their links lead to files and
//! headings that are there, and their commands to subcommands and flags the
//! binary takes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// The first `language` block of `text` that holds `marker`, as written.
fn block<'a>(text: &'a str, language: &str, marker: &str) -> Option<&'a str> {
    let fence = format!("```{language}\n");
    text.split(fence.as_str())
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains(marker))
}

/// The lines, trimmed, of the README's first `language` block that holds `marker`.
fn readme_block(language: &str, marker: &str) -> Vec<String> {
    let readme = read("README.md");
    block(&readme, language, marker)
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

/// `docs/adopt-a-client.md` shows the README's three adoption examples as
/// they are there, so that what a reader copies from it is what the tests run.
#[test]
fn the_client_page_shows_the_readmes_examples() {
    let readme = read("README.md");
    let page = read("docs/adopt-a-client.md");
    for (language, marker) in [
        ("rust", "Stormguard::start"),
        ("go", "Transport(nil)"),
        ("python", "AsyncDependency"),
    ] {
        let example = block(&readme, language, marker)
            .unwrap_or_else(|| panic!("no ```{language} block in the README holds {marker:?}"));
        assert_eq!(
            block(&page, language, marker),
            Some(example),
            "docs/adopt-a-client.md's {language} example is not the README's"
        );
    }
}

/// The README and the pages in `docs/`, the Markdown a reader is sent to.
fn pages() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    docs.sort();
    let mut pages = vec![root().join("README.md")];
    pages.extend(docs);
    pages
}

/// A page's name, from the repository's root.
fn name(page: &Path) -> String {
    page.strip_prefix(root()).unwrap().display().to_string()
}

/// The lines of `text` outside its fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped but
/// `-` and `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The targets of the Markdown links in `line`: what each `](` opens, up to `)`.
fn links(line: &str) -> Vec<&str> {
    line.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .collect()
}

/// Every relative link in the README and in `docs/` leads to a file that
/// exists and, with a `#`, to a heading of that file.
#[test]
fn every_link_between_the_pages_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in prose(&text).into_iter().flat_map(links) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let found = file.exists()
                && (fragment.is_empty()
                    || (file.is_file()
                        && prose(&std::fs::read_to_string(&file).unwrap())
                            .into_iter()
                            .filter(|line| line.starts_with('#'))
                            .any(|heading| anchor(heading) == fragment)));
            if !found {
                broken.push(format!("{}: {target}", name(&page)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// The `stormguard` commands in the shell blocks (```sh, ```console,
/// ```bash) of `text`: `stormguard SUBCOMMAND ...`, or `cargo run ... --
/// SUBCOMMAND ...` without `-p`, each as its subcommand and the `--flags`
/// it passes. Lines with placeholders (`[...]`, `<...>`) are left out.
fn commands(text: &str) -> Vec<(String, Vec<String>)> {
    let mut lines: Vec<String> = Vec::new();
    let mut shell = None;
    let mut continued = false;
    for line in text.lines() {
        if let Some(language) = line.strip_prefix("```") {
            shell = match shell {
                None => Some(matches!(language, "sh" | "console" | "bash")),
                Some(_) => None,
            };
            continued = false;
        } else if shell == Some(true) {
            let line = line.strip_prefix("$ ").unwrap_or(line);
            let (line, more) = match line.strip_suffix('\\') {
                Some(line) => (line, true),
                None => (line, false),
            };
            match lines.last_mut() {
                Some(last) if continued => last.push_str(line),
                _ => lines.push(line.to_owned()),
            }
            continued = more;
        }
    }
    let mut commands = Vec::new();
    for line in lines.iter().filter(|line| !line.contains(['[', '<'])) {
        let mut runs: Vec<Vec<&str>> = Vec::new();
        let mut words: Vec<&str> = Vec::new();
        for word in line.split_whitespace() {
            if word.starts_with('#') {
                break;
            }
            if matches!(word, "|" | "||" | "&" | "&&" | ";") {
                runs.push(std::mem::take(&mut words));
            } else if let Some((_, inner)) = word.split_once("$(") {
                runs.push(std::mem::take(&mut words));
                words.push(inner);
            } else {
                words.push(word);
            }
        }
        runs.push(words);
        for run in runs {
            let args = match run.as_slice() {
                ["stormguard", args @ ..] => args,
                ["cargo", "run", rest @ ..] if !rest.contains(&"-p") => {
                    match rest.iter().position(|word| *word == "--") {
                        Some(at) => &rest[at + 1..],
                        None => continue,
                    }
                }
                _ => continue,
            };
            let Some((subcommand, rest)) = args.split_first() else {
                continue;
            };
            let flags: Vec<String> = rest
                .iter()
                .filter(|word| word.starts_with("--"))
                .map(|word| {
                    word.split('=')
                        .next()
                        .unwrap()
                        .trim_end_matches([')', '"', '\''])
                        .to_owned()
                })
                .collect();
            commands.push(((*subcommand).to_owned(), flags));
        }
    }
    commands
}

/// Whether `help` names `flag` whole (`--pace-store` is not `--pace-store-ca`).
fn takes(help: &str, flag: &str) -> bool {
    help.match_indices(flag)
        .any(|(at, _)| !help[at + flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-'))
}

/// Every `stormguard` command in the README's and the docs' shell blocks
/// names a subcommand the binary has (its `--help` succeeds), and only
/// flags that subcommand's `--help` lists.
#[test]
fn every_command_in_the_pages_is_one_the_binary_takes() {
    let mut helps: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (subcommand, flags) in commands(&text) {
            checked += 1;
            let help = helps.entry(subcommand.clone()).or_insert_with(|| {
                let out = Command::new(env!("CARGO_BIN_EXE_stormguard"))
                    .args([subcommand.as_str(), "--help"])
                    .output()
                    .expect("the stormguard binary runs");
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            });
            match help.as_deref() {
                None => wrong.push(format!("{}: no subcommand {subcommand:?}", name(&page))),
                Some(help) => {
                    for flag in flags.iter().filter(|flag| !takes(help, flag)) {
                        wrong.push(format!(
                            "{}: `stormguard {subcommand}` takes no {flag}",
                            name(&page)
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 10, "the pages' commands were found: {checked}");
    assert!(
        wrong.is_empty(),
        "commands the binary does not take:\n{}",
        wrong.join("\n")
    );
}
