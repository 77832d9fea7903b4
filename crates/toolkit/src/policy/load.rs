//! Parse → decode → validate, and turning errors into [`Diagnostic`]s.

use std::fmt::{self, Write};
use std::io::Read;
use std::path::Path;

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

/// Bytes re-parsed to locate errors, at most: a large file gets positions for
/// its first errors only (1 MiB: 32), the rest are listed without one.
const LOCATE_BUDGET_BYTES: usize = 32 << 20;

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

/// Loads the policy file at `path`: the document and its hash, or every error.
pub fn load_file(path: &Path, limits: LoadLimits) -> Result<(PolicyDocument, ContentHash), Vec<Diagnostic>> {
    let bytes = read_capped(path, limits.max_bytes).map_err(|d| vec![d])?;
    let document = load_bytes(&path.display().to_string(), &bytes, limits)?;
    Ok((document, ContentHash::of(&bytes)))
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
    let locatable = LOCATE_BUDGET_BYTES / bytes.len().max(1);
    let mut out: Vec<Diagnostic> = errors
        .into_iter()
        .take(MAX_REPORTED)
        .enumerate()
        .map(|(i, error)| {
            let position = (i < locatable)
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
    // File order; errors without a position after those with one.
    out.sort_by_key(|d| (d.line.is_none(), d.line, d.column));
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
        let text = include_str!("../../../../policies/retry-policy.yaml");
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

    /// One case per rule: a small file and the one error it must give.
    #[test]
    fn every_rule_gives_its_error() {
        let cases = [
            ("defaults: {maxRetries: 101}", "defaults.maxRetries: must be between 0 and 100, found 101"),
            ("defaults: {maxRetries: 4294967296}", "defaults.maxRetries: 4294967296 is too large"),
            ("defaults: {maxRetries: 2.5}", "defaults.maxRetries: expected a whole number, found number 2.5"),
            ("defaults: {maxRetries: !!str 3}", "defaults.maxRetries: expected a whole number, found string \"3\""),
            ("defaults: {multiplier: .inf}", "defaults.multiplier: must be a finite number, found inf"),
            ("defaults: {multiplier: '2'}", "defaults.multiplier: expected a number, found string \"2\""),
            ("defaults: {jitterFactor: -0.1}", "defaults.jitterFactor: must be between 0 and 1, found -0.1"),
            ("defaults: {maxDelay: 2h}", "defaults.maxDelay: must be between 0s and 1h0m0s, found 2h0m0s"),
            (
                "defaults: {initialDelay: 20s}",
                "defaults.initialDelay: initialDelay (20s) is greater than maxDelay (10s); maxDelay caps every delay",
            ),
            ("defaults: {initialDelay: -5ms}", "defaults.initialDelay: duration must not be negative"),
            ("defaults: {initialDelay: 5sec}", "defaults.initialDelay: unknown unit \"sec\" in duration \"5sec\""),
            ("defaults: {initialDelay: true}", "defaults.initialDelay: expected a duration such as 250ms"),
            ("defaults: {jitter: random}", "defaults.jitter: unknown jitter \"random\"; expected one of: none,"),
            ("defaults: {jitter: 1}", "defaults.jitter: expected one of none, proportional, full, equal, decorrelated"),
            ("defaults: {delays: 1s}", "defaults.delays: expected a list of durations, found string \"1s\""),
            ("defaults: {delays: [1s, 20s]}", "defaults.delays: delays[1] (20s) is greater than maxDelay (10s)"),
            ("defaults: {delays: [1s, fast]}", "defaults.delays[1]: invalid duration \"fast\""),
            ("defaults: {perTryTimeout: 25h}", "defaults.perTryTimeout: must be between 0s and 24h0m0s"),
            ("defaults: {maxElapsed: 25h}", "defaults.maxElapsed: must be between 0s and 24h0m0s"),
            ("defaults: {retryOn: [5xx, 5xx]}", "defaults.retryOn[1]: 5xx is listed twice"),
            ("defaults: {retryOn: [200]}", "defaults.retryOn[0]: status 200 is not an error status"),
            ("defaults: {retryOn: [5XX]}", "defaults.retryOn[0]: unknown retry condition \"5XX\"; did you mean \"5xx\"?"),
            ("defaults: {retryOn: 5xx}", "defaults.retryOn: expected a list of conditions"),
            ("defaults: {budget: {retryRatio: 2000}}", "defaults.budget.retryRatio: must be between 0 and 1000"),
            ("defaults: {budget: {ttl: 90s}}", "defaults.budget.ttl: must be between 1s and 1m0s, found 1m30s"),
            ("defaults: {budget: {minRetriesPerSecond: 2000000}}", "defaults.budget.minRetriesPerSecond: must be"),
            ("defaults: {budget: {enabled: yes}}", "defaults.budget.enabled: expected true or false, found string \"yes\""),
            ("defaults: {budget: {retryRatios: 1}}", "defaults.budget.retryRatios: unknown key \"retryRatios\"; did you mean"),
            ("defaults: {retryThrottling: {maxTokens: 0}}", "defaults.retryThrottling.maxTokens: must be between 1 and 1000"),
            ("defaults: {retryThrottling: {tokenRatio: 0}}", "defaults.retryThrottling.tokenRatio: must be above 0 and at most 1000"),
            ("defaults: {circuitBreaker: {slidingWindow: [1]}}", "defaults.circuitBreaker.slidingWindow: expected a number of calls"),
            ("defaults: {circuitBreaker: {slidingWindow: 0}}", "defaults.circuitBreaker.slidingWindow: must be between 1 and 10000"),
            ("defaults: {circuitBreaker: {slidingWindow: 2h}}", "defaults.circuitBreaker.slidingWindow: must be between 1s and 1h0m0s"),
            ("defaults: {circuitBreaker: {failureRateThreshold: 1.5}}", "defaults.circuitBreaker.failureRateThreshold: must be above 0"),
            ("defaults: {circuitBreaker: {slowCallRateThreshold: 0}}", "defaults.circuitBreaker.slowCallRateThreshold: must be above 0"),
            ("defaults: {circuitBreaker: {slowCallDuration: 0s}}", "defaults.circuitBreaker.slowCallDuration: must be between 1ms"),
            ("defaults: {circuitBreaker: {minimumCalls: 0}}", "defaults.circuitBreaker.minimumCalls: must be between 1 and 10000"),
            ("defaults: {circuitBreaker: {consecutiveFailures: 10001}}", "defaults.circuitBreaker.consecutiveFailures: must be between 0"),
            ("defaults: {circuitBreaker: {openTimeout: 0s}}", "defaults.circuitBreaker.openTimeout: must be between 1ms and 1h0m0s"),
            ("defaults: {circuitBreaker: {halfOpenMaxCalls: 0}}", "defaults.circuitBreaker.halfOpenMaxCalls: must be between 1 and 1000"),
            ("defaults: {circuitBreaker: {successThreshold: 0}}", "defaults.circuitBreaker.successThreshold: must be between 1 and 1000"),
            ("defaults: {hedging: {maxHedges: 5}}", "defaults.hedging.maxHedges: must be between 1 and 4, found 5"),
            ("defaults: {hedging: {delay: 2h}}", "defaults.hedging.delay: must be between 0s and 1h0m0s"),
            ("defaults: {hedging: []}", "defaults.hedging: expected a mapping of keys, found a list"),
            ("defaults: {MaxRetries: 1}", "defaults.MaxRetries: unknown key \"MaxRetries\"; did you mean \"maxRetries\"?"),
            ("defaults: {max_delay: 1s}", "defaults.max_delay: unknown key \"max_delay\"; did you mean \"maxDelay\"?"),
            ("defaults: [a]", "defaults: expected a mapping of keys, found a list"),
            ("services: {-bad-: {}}", "services.-bad-: service name \"-bad-\" must start and end with a letter or digit"),
            ("services: {Api: {}}", "services.Api: service name \"Api\" may contain only lowercase letters"),
            ("services: !custom {}", "services: expected a mapping of keys, found a YAML tag (!custom)"),
            ("services: {a: 3}", "services.a: expected a mapping of keys, found number 3"),
            ("gatewayRetries: 'no'", "gatewayRetries: expected true or false, found string \"no\""),
            ("version: 1", "version: unknown key \"version\"; expected one of: defaults, services, gatewayRetries"),
            (
                "defaults: {maxDelay: 1s}\nservices: {a: {initialDelay: 2s}}",
                "services.a.initialDelay: initialDelay (2s) is greater than maxDelay (1s)",
            ),
            ("defaults: {<<: 1}", "expected a mapping or list of mappings for merging"),
        ];
        for (text, expected) in cases {
            let errors = load_bytes("p.yaml", text.as_bytes(), LoadLimits::default())
                .expect_err(text)
                .iter()
                .map(|d| format!("{}: {}", d.path.as_deref().unwrap_or("-"), d.message))
                .collect::<Vec<_>>();
            assert_eq!(errors.len(), 1, "{text}: {errors:?}");
            let shown = errors[0].trim_start_matches("-: ");
            assert!(
                shown.starts_with(expected),
                "{text}\n  got:    {shown}\n  wanted: {expected}"
            );
        }
    }

    #[test]
    fn merge_keys_share_settings_and_explicit_keys_win() {
        let text = "\
defaults:
  maxRetries: 3
services:
  a: &careful
    maxRetries: 1
    circuitBreaker: {enabled: true}
  b:
    <<: *careful
    maxRetries: 2
";
        let document = load_bytes("p.yaml", text.as_bytes(), LoadLimits::default()).unwrap();
        let b = document.resolve("b");
        assert_eq!(b.policy.max_retries, 2);
        assert!(b.policy.circuit_breaker.enabled);
        assert_eq!(b.overridden, ["circuitBreaker.enabled", "maxRetries"]);
    }

    #[test]
    fn the_full_example_uses_every_key() {
        use stormguard_core::policy::{Layered, RetryPolicy};
        let text = include_str!("../../../../policies/full-example.yaml");
        let document = load_bytes("full-example.yaml", text.as_bytes(), LoadLimits::default()).unwrap();
        let mut used = Vec::new();
        RetryPolicy::set_keys(&document.defaults, "", &mut used);
        for layer in document.services.values() {
            RetryPolicy::set_keys(layer, "", &mut used);
        }
        let mut all = Vec::new();
        RetryPolicy::all_keys("", &mut all);
        let unused: Vec<&String> = all.iter().filter(|key| !used.contains(key)).collect();
        assert!(
            unused.is_empty(),
            "policies/full-example.yaml never sets {unused:?}"
        );
        assert!(
            all.iter().any(|k| k == "circuitBreaker.openTimeout"),
            "nested keys are listed: {all:?}"
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
