//! Parse → decode → validate, and turning errors into [`Diagnostic`]s.

use std::fmt::{self, Write};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};
use stormguard_core::policy::{PolicyDocument, PolicyError};

use super::yaml;

/// The default cap on a policy file's size: 1 MiB, as a ConfigMap's.
pub const DEFAULT_MAX_POLICY_BYTES: usize = 1 << 20;

/// Bounds on a policy file, so that no file can make loading slow or large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadLimits {
    /// Largest file, in bytes.
    pub max_bytes: usize,
    /// Most flow collections (`[` or `{`); see [`yaml::DEFAULT_MAX_FLOW_COLLECTIONS`].
    pub max_flow_collections: usize,
}

impl Default for LoadLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_POLICY_BYTES,
            max_flow_collections: yaml::DEFAULT_MAX_FLOW_COLLECTIONS,
        }
    }
}

/// Errors beyond this many are summed up in one line; each costs a re-parse to locate.
const MAX_REPORTED: usize = 100;

/// Time spent locating errors at most: a file that is slow to parse (deep
/// nesting) gets the rest of its errors without line and column, not a hang.
const LOCATE_BUDGET: Duration = Duration::from_secs(1);

/// One problem with a policy file, said so an operator can go straight to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The dotted key path, when the problem is a key or value.
    pub path: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl Diagnostic {
    /// A problem with the file as a whole (unreadable, too large).
    pub fn file(file: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line: None,
            column: None,
            path: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        if let Some(path) = &self.path {
            write!(f, ": {path}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The SHA-256 of a policy file's bytes: its identity across replicas.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The full hash in lowercase hex.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// The first 48 bits as a number: a version that every replica serving the
    /// same bytes agrees on, exact in a Prometheus sample (an f64).
    pub fn version_number(&self) -> u64 {
        self.0[..6].iter().fold(0, |n, b| n << 8 | u64::from(*b))
    }
}

/// Shown as `sha256:<hex>`, the form the API and the status use.
impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// Reads at most `max_bytes` of `path`; a longer file is an error naming the cap.
pub fn read_capped(path: &Path, max_bytes: usize) -> Result<Vec<u8>, Diagnostic> {
    let name = path.display().to_string();
    // Opening a FIFO would block until a writer appears, holding up every reload.
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(Diagnostic::file(&name, "is not a regular file")),
        _ => {}
    }
    let file = std::fs::File::open(path).map_err(|e| Diagnostic::file(&name, format!("cannot open: {e}")))?;
    let mut bytes = Vec::new();
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Diagnostic::file(&name, format!("cannot read: {e}")))?;
    if bytes.len() > max_bytes {
        return Err(too_large(&name, max_bytes));
    }
    Ok(bytes)
}

fn too_large(file: &str, max_bytes: usize) -> Diagnostic {
    Diagnostic::file(
        file,
        format!(
            "the policy file is larger than the limit of {max_bytes} bytes; raise it with --max-policy-bytes"
        ),
    )
}

/// Parses and validates a policy file's bytes; `file` names it in diagnostics.
pub fn load_bytes(file: &str, bytes: &[u8], limits: LoadLimits) -> Result<PolicyDocument, Vec<Diagnostic>> {
    if bytes.len() > limits.max_bytes {
        return Err(vec![too_large(file, limits.max_bytes)]);
    }
    let root = yaml::parse(bytes, limits.max_flow_collections).map_err(|e| {
        vec![Diagnostic {
            file: file.to_owned(),
            line: e.position.map(|p| p.line),
            column: e.position.map(|p| p.column),
            path: None,
            message: e.message,
        }]
    })?;
    PolicyDocument::from_node(&root).map_err(|errors| diagnose(file, bytes, errors))
}

fn diagnose(file: &str, bytes: &[u8], errors: Vec<PolicyError>) -> Vec<Diagnostic> {
    let total = errors.len();
    let deadline = Instant::now() + LOCATE_BUDGET;
    let mut out: Vec<Diagnostic> = errors
        .into_iter()
        .take(MAX_REPORTED)
        .map(|error| {
            let position = (Instant::now() < deadline)
                .then(|| yaml::locate(bytes, &error.path, error.target))
                .flatten();
            Diagnostic {
                file: file.to_owned(),
                line: position.map(|p| p.line),
                column: position.map(|p| p.column),
                path: (!error.path.0.is_empty()).then(|| error.path.to_string()),
                message: error.message,
            }
        })
        .collect();
    out.sort_by_key(|d| (d.line, d.column));
    if total > MAX_REPORTED {
        out.push(Diagnostic::file(
            file,
            format!("{} more errors not shown", total - MAX_REPORTED),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        load_bytes("p.yaml", text.as_bytes(), LoadLimits::default())
            .unwrap_err()
            .iter()
            .map(|d| d.to_string())
            .collect()
    }

    #[test]
    fn seed_configmap_loads() {
        let text = include_str!("../../policies/retry-policy.yaml");
        let document = load_bytes("retry-policy.yaml", text.as_bytes(), LoadLimits::default()).unwrap();
        assert_eq!(document.services.len(), 3);
        assert_eq!(document.resolve("payment-service").policy.max_retries, 2);
    }

    #[test]
    fn errors_name_file_line_column_and_path_in_file_order() {
        let text = "\
defaults:
  maxDelays: 5s
  initialDelay: 100
services:
  payment-service:
    maxRetries: -1
";
        assert_eq!(
            errors(text),
            [
                "p.yaml:2:3: defaults.maxDelays: unknown key \"maxDelays\"; did you mean \"maxDelay\"?",
                "p.yaml:3:17: defaults.initialDelay: a bare number is not a duration; write 100 with a unit, e.g. 100ms or 2s",
                "p.yaml:6:17: services.payment-service.maxRetries: must not be negative, found -1",
            ]
        );
    }

    #[test]
    fn syntax_errors_and_empty_files() {
        let syntax = errors("defaults: {maxRetries: 1\n");
        assert!(syntax[0].starts_with("p.yaml:2:"), "{syntax:?}");
        assert!(errors("")[0].contains("the policy file is empty"));
        assert!(errors("# only a comment\n")[0].contains("the policy file is empty"));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("policy.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let error = read_capped(&fifo, DEFAULT_MAX_POLICY_BYTES).unwrap_err();
        assert_eq!(error.message, "is not a regular file");
    }

    #[test]
    fn size_cap_is_named() {
        let limits = LoadLimits {
            max_bytes: 10,
            ..LoadLimits::default()
        };
        let error = load_bytes("p.yaml", &[b' '; 11], limits).unwrap_err();
        assert!(error[0].message.contains("--max-policy-bytes"));
    }

    #[test]
    fn error_flood_is_summed_up() {
        let text: String = (0..150).map(|i| format!("k{i}: 1\n")).collect();
        let all = errors(&text);
        assert_eq!(all.len(), MAX_REPORTED + 1);
        assert!(all.last().unwrap().ends_with("50 more errors not shown"));
    }

    #[test]
    fn content_hash_is_stable() {
        let hash = ContentHash::of(b"defaults: {}\n");
        assert_eq!(hash, ContentHash::of(b"defaults: {}\n"));
        assert_ne!(hash, ContentHash::of(b"defaults: {}\n\n"));
        let empty = ContentHash::of(b"");
        assert_eq!(
            empty.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(empty.version_number(), 0xe3b0c44298fc);
    }
}
