//! `stormguard check`: validate a policy file and show what each service gets.
//!
//! The steps are load (parse and validate, all errors at once), then render
//! the resolved policies. Judging a *valid* policy for storm risk is a step
//! of its own between the two; it reads the same `PolicyDocument`.

use std::fmt::Write;
use std::path::Path;

use stormguard_core::policy::{GoDuration, PolicyDocument, RetryPolicy};

use crate::policy::{ContentHash, Diagnostic, LoadLimits};
use crate::reload::load_file;

/// Checks `path`; returns the report and whether the file is valid.
pub fn check(path: &Path, limits: LoadLimits) -> (String, bool) {
    match load_file(path, limits) {
        Ok((document, hash)) => (valid_report(path, &document, &hash), true),
        Err(errors) => (invalid_report(&errors), false),
    }
}

fn invalid_report(errors: &[Diagnostic]) -> String {
    let mut out = String::new();
    for error in errors {
        let _ = writeln!(out, "error: {error}");
    }
    let plural = if errors.len() == 1 { "" } else { "s" };
    let _ = writeln!(out, "{} error{plural}; the file is invalid", errors.len());
    out
}

const HEADER: [&str; 10] = [
    "SERVICE",
    "RETRIES",
    "INITIAL",
    "MAX",
    "MULT",
    "JITTER",
    "BUDGET",
    "BREAKER",
    "HEDGING",
    "OVERRIDES",
];

fn valid_report(path: &Path, document: &PolicyDocument, hash: &ContentHash) -> String {
    let mut rows = vec![HEADER.map(str::to_owned).to_vec()];
    rows.push(row("(defaults)", &document.defaults_policy(), "-".into()));
    for name in document.services.keys() {
        let resolved = document.resolve(name);
        let overrides = if resolved.overridden.is_empty() {
            "(none)".to_owned()
        } else {
            resolved.overridden.join(", ")
        };
        rows.push(row(name, &resolved.policy, overrides));
    }
    let mut out = format!(
        "{}: valid (sha256:{}, {} services, gatewayRetries: {})\n\n",
        path.display(),
        &hash.hex()[..16],
        document.services.len(),
        document.gateway_retries
    );
    out.push_str(&table(&rows));
    out.push_str("\nServices not listed get (defaults).\n");
    out
}

fn row(name: &str, p: &RetryPolicy, overrides: String) -> Vec<String> {
    let jitter = match p.jitter {
        stormguard_core::policy::Jitter::Proportional => format!("proportional ±{}", p.jitter_factor),
        other => other.to_string(),
    };
    let backoff = if p.delays.is_empty() {
        (GoDuration(p.initial_delay).to_string(), p.multiplier.to_string())
    } else {
        let list: Vec<String> = p.delays.iter().map(|d| GoDuration(*d).to_string()).collect();
        (format!("[{}]", list.join(" ")), "-".into())
    };
    let on_off = |enabled: bool, detail: String| if enabled { detail } else { "off".into() };
    vec![
        name.to_owned(),
        p.max_retries.to_string(),
        backoff.0,
        GoDuration(p.max_delay).to_string(),
        backoff.1,
        jitter,
        on_off(p.budget.enabled, format!("{}%", p.budget.retry_ratio * 100.0)),
        on_off(
            p.circuit_breaker.enabled,
            format!("open {}", GoDuration(p.circuit_breaker.open_timeout)),
        ),
        on_off(
            p.hedging.enabled,
            format!("{}×{}", p.hedging.max_hedges, GoDuration(p.hedging.delay)),
        ),
        overrides,
    ]
}

/// Left-aligned columns separated by two spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_file_shows_a_row_per_service() {
        let (report, valid) = check(Path::new("policies/retry-policy.yaml"), LoadLimits::default());
        assert!(valid, "{report}");
        let payment = report.lines().find(|l| l.starts_with("payment-service")).unwrap();
        let cells: Vec<&str> = payment.split_whitespace().collect();
        assert_eq!(&cells[..5], ["payment-service", "2", "200ms", "10s", "2"]);
        assert!(payment.ends_with("initialDelay, maxRetries"));
        assert!(report.contains("(defaults)"));
    }

    #[test]
    fn invalid_file_lists_every_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, "defaults:\n  maxRetries: x\n  jitterFactor: 2\n").unwrap();
        let (report, valid) = check(&path, LoadLimits::default());
        assert!(!valid);
        assert!(
            report.contains(":2:15: defaults.maxRetries: expected a whole number"),
            "{report}"
        );
        assert!(
            report.contains(":3:17: defaults.jitterFactor: must be between 0 and 1"),
            "{report}"
        );
        assert!(report.ends_with("2 errors; the file is invalid\n"));
    }
}
