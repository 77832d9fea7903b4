//! `stormguard check`: validate a policy file and show what each service gets.
//!
//! The steps are load (parse and validate, all errors at once), the
//! storm-risk lint of the valid document ([`crate::lint`]), then render the
//! resolved policies, the warnings and each service's forecast.

use std::fmt::Write;
use std::path::Path;

use stormguard_core::policy::{BreakerScope, ForecastScenario, GoDuration, PolicyDocument, RetryPolicy};

use crate::lint::{lint, Forecast, Lint};
use crate::policy::load_file;
use crate::policy::{ContentHash, Diagnostic, LoadLimits};
use crate::shape::ShapeFlags;
use crate::sim::Scenario;
use crate::text::columns;

/// What `check` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Valid, and the lint found nothing.
    Clean,
    /// Valid, with storm-risk warnings.
    Warnings,
    /// Invalid: the daemon would refuse it.
    Invalid,
}

/// Checks `path`, forecasting on the fleet its `forecast:` block states
/// with `shape`'s flags in place of the keys they set; returns the report
/// and the verdict.
pub fn check(path: &Path, limits: LoadLimits, shape: &ShapeFlags) -> (String, Verdict) {
    match load_file(path, limits) {
        Ok((document, hash)) => {
            let lint = lint(&document, &|herd| shape.apply(herd));
            let mut report = valid_report(path, &document, &hash);
            report.push_str(&lint_report(&lint));
            let verdict = if lint.warnings.is_empty() {
                Verdict::Clean
            } else {
                Verdict::Warnings
            };
            (report, verdict)
        }
        Err(errors) => (invalid_report(&errors), Verdict::Invalid),
    }
}

fn lint_report(lint: &Lint) -> String {
    let mut out = String::new();
    match lint.warnings.len() {
        0 => out.push_str("\nstorm-risk lint: no warnings\n"),
        n => {
            let _ = writeln!(
                out,
                "\nstorm-risk lint: {n} warning{}",
                if n == 1 { "" } else { "s" }
            );
            for w in &lint.warnings {
                let _ = writeln!(out, "warning[{}] {}: {}", w.rule.code(), w.service, w.message);
            }
        }
    }
    let herd = ForecastScenario::default();
    let outage = herd.outages[0];
    let _ = writeln!(
        out,
        "\nforecast: each service's policy against a herd of calls failing at once, and a service that takes \
         CAPACITY requests a second once the outage ends (the file's `forecast:` block sets them, the fleet and the \
         dependency; by default {}, a {} outage)",
        Scenario::forecast(&herd, outage).shape(),
        GoDuration(outage)
    );
    out.push_str(&shapes(&lint.forecasts));
    let mut rows = vec![[
        "SERVICE", "OUTAGE", "CALLS", "CAPACITY", "WASTED", "P99", "DRAINED", "SERVED", "GAVE UP", "PACED",
    ]
    .map(str::to_owned)
    .to_vec()];
    for f in &lint.forecasts {
        rows.push(vec![
            f.service.clone(),
            format!("{}s", f.outage_seconds),
            f.clients.to_string(),
            format!("{}/s", f.capacity),
            f.wasted.to_string(),
            f.p99_seconds.map_or("-".into(), |p| format!("{p:.1}s")),
            format!("{:.1}s", f.drain_seconds),
            f.succeeded.to_string(),
            f.gave_up.to_string(),
            if f.paced {
                "through the daemon".into()
            } else {
                "no (no send gate)".into()
            },
        ]);
    }
    out.push_str(&columns(&rows));
    if !lint.forecasts.is_empty() {
        out.push_str("\nwhat the forecast means:\n");
        for f in &lint.forecasts {
            let _ = writeln!(
                out,
                "- {} ({}s outage): {}",
                f.service, f.outage_seconds, f.explanation
            );
        }
    }
    out
}

/// The fleets the forecasts ran in, a line each: one for all services, or
/// each with the services it is theirs.
fn shapes(forecasts: &[Forecast]) -> String {
    let mut fleets: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in forecasts {
        match fleets.iter_mut().find(|(shape, _)| *shape == f.fleet.shape) {
            Some((_, services)) if services.last() == Some(&f.service.as_str()) => {}
            Some((_, services)) => services.push(&f.service),
            None => fleets.push((&f.fleet.shape, vec![&f.service])),
        }
    }
    match fleets.as_slice() {
        [(shape, _)] => format!("ran in: {shape}\n"),
        _ => fleets
            .iter()
            .map(|(shape, services)| format!("ran in: {shape}: {}\n", services.join(", ")))
            .collect(),
    }
}

/// Every error of an invalid file, one a line, and how many.
pub fn invalid_report(errors: &[Diagnostic]) -> String {
    let mut out = String::new();
    for error in errors {
        let _ = writeln!(out, "error: {error}");
    }
    let plural = if errors.len() == 1 { "" } else { "s" };
    let _ = writeln!(out, "{} error{plural}; the file is invalid", errors.len());
    out
}

const HEADER: [&str; 11] = [
    "SERVICE",
    "RETRIES",
    "INITIAL",
    "MAX",
    "MULT",
    "JITTER",
    "BUDGET",
    "BREAKER",
    "HEDGING",
    "GATE",
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
    out.push_str(&columns(&rows));
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
            match p.circuit_breaker.scope {
                BreakerScope::Process => format!("open {}", GoDuration(p.circuit_breaker.open_timeout)),
                BreakerScope::Fleet => format!("open {} fleet", GoDuration(p.circuit_breaker.open_timeout)),
            },
        ),
        on_off(
            p.hedging.enabled,
            format!("{}×{}", p.hedging.max_hedges, GoDuration(p.hedging.delay)),
        ),
        on_off(p.gate.enabled, "on".into()),
        overrides,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_file_shows_a_row_per_service() {
        let (report, verdict) = check(
            Path::new("../../policies/retry-policy.yaml"),
            LoadLimits::default(),
            &ShapeFlags::default(),
        );
        assert_eq!(verdict, Verdict::Warnings, "{report}");
        assert!(report.contains("storm-risk lint: 4 warnings"), "{report}");
        assert!(
            report.contains(
                "\nwhat the forecast means:\n- (defaults) (10s outage): every call fails: its 3 retries"
            ),
            "{report}"
        );
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("payment-service") && l.contains("3000")),
            "{report}"
        );
        let payment = report.lines().find(|l| l.starts_with("payment-service")).unwrap();
        let cells: Vec<&str> = payment.split_whitespace().collect();
        assert_eq!(&cells[..5], ["payment-service", "2", "200ms", "10s", "2"]);
        assert!(payment.ends_with("initialDelay, maxRetries"));
        assert!(report.contains("(defaults)"));
    }

    #[test]
    fn a_fleet_scoped_breaker_says_so_in_its_row() {
        let mut policy = RetryPolicy::default();
        policy.circuit_breaker.enabled = true;
        let alone = row("orders", &policy, String::new());
        policy.circuit_breaker.scope = BreakerScope::Fleet;
        let fleet = row("orders", &policy, String::new());
        assert_eq!(
            (alone[7].as_str(), fleet[7].as_str()),
            ("open 30s", "open 30s fleet")
        );
    }

    #[test]
    fn warnings_are_listed_with_their_rule_and_service() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("risky.yaml");
        std::fs::write(
            &path,
            "defaults: {jitter: none, maxRetries: 10, initialDelay: 1s}\n",
        )
        .unwrap();
        let (report, verdict) = check(&path, LoadLimits::default(), &ShapeFlags::default());
        assert_eq!(verdict, Verdict::Warnings);
        assert!(
            report.contains("storm-risk lint: 1 warning\nwarning[no-jitter] (defaults): "),
            "{report}"
        );
    }

    #[test]
    fn a_bad_forecast_block_is_named_like_any_other_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, "defaults: {}\nforecast:\n  clients: 0\n  outages: [1h]\n").unwrap();
        let (report, verdict) = check(&path, LoadLimits::default(), &ShapeFlags::default());
        assert_eq!(verdict, Verdict::Invalid);
        assert!(
            report.contains(":3:12: forecast.clients: must be between 1 and 10000"),
            "{report}"
        );
        assert!(
            report.contains(":4:13: forecast.outages[0]: must be at most 10m0s"),
            "{report}"
        );
    }

    #[test]
    fn invalid_file_lists_every_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, "defaults:\n  maxRetries: x\n  jitterFactor: 2\n").unwrap();
        let (report, verdict) = check(&path, LoadLimits::default(), &ShapeFlags::default());
        assert_eq!(verdict, Verdict::Invalid);
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
