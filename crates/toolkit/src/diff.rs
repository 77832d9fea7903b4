//! `stormguard diff OLD NEW`: what a change to a policy file does, before
//! it ships, service by service: each resolved key that changes and where
//! its new value comes from, services added and removed, lint warnings that
//! appear or clear, and each changed service's forecast before and after on
//! the fleet the file states.
//!
//! A service's policy before and after is what each file resolves for it:
//! a service the old file does not list got the defaults then, and one the
//! new file drops gets them from now on. A text diff of the YAML cannot say
//! that a change to `defaults` reaches every service but those that
//! override the key.

use std::collections::BTreeSet;
use std::fmt::Write;

use serde::Serialize;
use stormguard_core::policy::{Layered, PolicyDocument, ResolvedPolicy, RetryPolicy};

use crate::lint::{lint, Forecast, Lint, Warning, DEFAULTS};

mod served;
pub use served::{served_document, ServedError};

/// How a service's entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Entry {
    /// Listed in the new file only: it got the defaults before.
    Added,
    /// Listed in the old file only: it gets the defaults from now on.
    Removed,
    /// Listed in both, or the defaults themselves.
    Kept,
}

/// Where a key's new value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// The service's own entry.
    Override,
    /// The file's `defaults`.
    Defaults,
    /// Neither: stormguard's built-in value.
    BuiltIn,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Override => "override",
            Origin::Defaults => "defaults",
            Origin::BuiltIn => "built-in",
        }
    }
}

/// One resolved key that changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyChange {
    /// The dotted key, as a file writes it (`budget.scope`).
    pub key: String,
    /// Its value before, as a file writes it.
    pub old: String,
    /// Its value after.
    pub new: String,
    /// Where the new value comes from.
    pub from: Origin,
}

/// One forecast's figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// Requests the server rejected.
    pub wasted: u64,
    /// 99th percentile time to success, if any call succeeded.
    pub p99_seconds: Option<f64>,
    /// Calls that gave up.
    pub gave_up: u32,
}

impl From<&Forecast> for Figures {
    fn from(f: &Forecast) -> Self {
        Self {
            wasted: f.wasted,
            p99_seconds: f.p99_seconds,
            gave_up: f.gave_up,
        }
    }
}

/// A service's forecast for one outage, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForecastChange {
    /// The outage.
    pub outage_seconds: f64,
    /// Under the old policy.
    pub old: Figures,
    /// Under the new one.
    pub new: Figures,
    /// Whether the new policy leaves more calls to give up, wastes more
    /// than the threshold more, or, serving no more calls, has its p99
    /// more than the threshold later.
    pub worse: bool,
}

/// What the change does to one service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceChange {
    /// The service, or `(defaults)` for every service neither file lists.
    pub service: String,
    /// How its entry changed.
    pub entry: Entry,
    /// Each resolved key that changes, in file order.
    pub keys: Vec<KeyChange>,
    /// Its forecasts before and after, per outage.
    pub forecasts: Vec<ForecastChange>,
}

/// What a change to a policy file does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// The services whose resolved policy changes, the defaults first.
    pub services: Vec<ServiceChange>,
    /// Lint warnings the new file has and the old did not (by service and rule).
    pub warnings_added: Vec<Warning>,
    /// Lint warnings the old file had and the new does not (by service and rule).
    pub warnings_cleared: Vec<Warning>,
    /// The share by which a forecast may worsen before it counts as worse.
    pub threshold: f64,
}

impl Diff {
    /// Whether a forecast worsens past the threshold or a warning appears:
    /// what a pipeline gates on.
    pub fn worsens(&self) -> bool {
        !self.warnings_added.is_empty() || self.services.iter().flat_map(|s| &s.forecasts).any(|f| f.worse)
    }
}

/// What changing `old` into `new` does; a forecast is worse when its waste
/// or p99 grows by more than `threshold` (0.1 = 10 %) or more calls give up.
pub fn diff(old: &PolicyDocument, new: &PolicyDocument, threshold: f64) -> Diff {
    let (old_lint, new_lint) = (lint(old, &|herd| herd), lint(new, &|herd| herd));
    let mut services = changes(old, new);
    for change in &mut services {
        change.forecasts = forecast_changes(&change.service, (old, &old_lint), (new, &new_lint), threshold);
    }
    let (warnings_added, warnings_cleared) = warnings(&old_lint, &new_lint);
    Diff {
        services,
        warnings_added,
        warnings_cleared,
        threshold,
    }
}

/// The services whose resolved policy or entry changes, the defaults
/// first, without forecasts: cheap enough for every reload.
pub fn changes(old: &PolicyDocument, new: &PolicyDocument) -> Vec<ServiceChange> {
    let names: BTreeSet<&String> = old.services.keys().chain(new.services.keys()).collect();
    let mut services = Vec::new();
    let defaults = compare(
        DEFAULTS,
        Entry::Kept,
        (&resolved_defaults(old), &resolved_defaults(new)),
        new,
    );
    services.extend(defaults);
    for name in names {
        let entry = match (old.services.contains_key(name), new.services.contains_key(name)) {
            (false, _) => Entry::Added,
            (_, false) => Entry::Removed,
            _ => Entry::Kept,
        };
        let pair = (&old.resolve(name), &new.resolve(name));
        services.extend(compare(name, entry, pair, new));
    }
    services
}

/// The policy every service neither file lists gets.
fn resolved_defaults(document: &PolicyDocument) -> ResolvedPolicy {
    document.resolve("")
}

/// The change to one service, if its resolved policy or its entry changes.
fn compare(
    service: &str,
    entry: Entry,
    (old, new): (&ResolvedPolicy, &ResolvedPolicy),
    document: &PolicyDocument,
) -> Option<ServiceChange> {
    let (before, after) = (written(&old.policy), written(&new.policy));
    let mut defaults_set = Vec::new();
    RetryPolicy::set_keys(&document.defaults, "", &mut defaults_set);
    let keys: Vec<KeyChange> = before
        .into_iter()
        .zip(after)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((key, before), (_, after))| {
            let from = if service != DEFAULTS && new.overridden.contains(&key) {
                Origin::Override
            } else if defaults_set.contains(&key) {
                Origin::Defaults
            } else {
                Origin::BuiltIn
            };
            KeyChange {
                key,
                old: before,
                new: after,
                from,
            }
        })
        .collect();
    (!keys.is_empty() || entry != Entry::Kept).then(|| ServiceChange {
        service: service.to_string(),
        entry,
        keys,
        forecasts: Vec::new(),
    })
}

/// Every key of `policy` with its value, in file order.
fn written(policy: &RetryPolicy) -> Vec<(String, String)> {
    let mut out = Vec::new();
    policy.written("", &mut out);
    out
}

/// `service`'s forecasts before and after, paired by outage. A service a
/// file does not list is forecast as the defaults.
fn forecast_changes(
    service: &str,
    (old, old_lint): (&PolicyDocument, &Lint),
    (new, new_lint): (&PolicyDocument, &Lint),
    threshold: f64,
) -> Vec<ForecastChange> {
    let of = |document: &PolicyDocument, lint: &'_ Lint| -> Vec<Forecast> {
        let name = if document.services.contains_key(service) {
            service
        } else {
            DEFAULTS
        };
        lint.forecasts
            .iter()
            .filter(|f| f.service == name)
            .cloned()
            .collect()
    };
    let (before, after) = (of(old, old_lint), of(new, new_lint));
    before
        .iter()
        .filter_map(|b| {
            let a = after.iter().find(|a| a.outage_seconds == b.outage_seconds)?;
            let (old, new) = (Figures::from(b), Figures::from(a));
            Some(ForecastChange {
                outage_seconds: b.outage_seconds,
                worse: worse(old, new, threshold),
                old,
                new,
            })
        })
        .collect()
}

/// Whether `new` is worse than `old`: more calls give up, or it wastes
/// more than `threshold` more, or, serving no more calls, its p99 is more
/// than `threshold` later (a policy that serves calls the old one gave up
/// on serves them late, which is no worse).
fn worse(old: Figures, new: Figures, threshold: f64) -> bool {
    let grows = |before: f64, after: f64| after > before * (1.0 + threshold) && after - before >= 1e-9;
    let serves_more = new.gave_up < old.gave_up;
    let p99 = match (old.p99_seconds, new.p99_seconds) {
        (Some(before), Some(after)) => !serves_more && grows(before, after),
        (Some(_), None) => true,
        _ => false,
    };
    grows(old.wasted as f64, new.wasted as f64) || p99 || new.gave_up > old.gave_up
}

/// The warnings the new lint has and the old did not, and the reverse, by
/// service and rule: a warning whose figures moved is the same warning.
fn warnings(old: &Lint, new: &Lint) -> (Vec<Warning>, Vec<Warning>) {
    let only = |a: &Lint, b: &Lint| -> Vec<Warning> {
        a.warnings
            .iter()
            .filter(|w| {
                !b.warnings
                    .iter()
                    .any(|o| o.service == w.service && o.rule == w.rule)
            })
            .cloned()
            .collect()
    };
    (only(new, old), only(old, new))
}

/// The diff as text, for a terminal or a pull request's comment.
pub fn as_text(diff: &Diff) -> String {
    let mut out = String::new();
    if diff.services.is_empty() && diff.warnings_added.is_empty() && diff.warnings_cleared.is_empty() {
        out.push_str("no service's resolved policy changes\n");
        return out;
    }
    for change in &diff.services {
        let entry = match change.entry {
            Entry::Added => " (added: it got the defaults until now)",
            Entry::Removed => " (removed: it gets the defaults from now on)",
            Entry::Kept => "",
        };
        let _ = writeln!(out, "{}{entry}", change.service);
        for key in &change.keys {
            let _ = writeln!(
                out,
                "  {}: {} -> {} ({})",
                key.key,
                key.old,
                key.new,
                key.from.name()
            );
        }
        for f in &change.forecasts {
            let _ = writeln!(
                out,
                "  forecast, {} outage: wasted {} -> {}, p99 {} -> {}, gave up {} -> {}{}",
                seconds(f.outage_seconds),
                f.old.wasted,
                f.new.wasted,
                p99(f.old.p99_seconds),
                p99(f.new.p99_seconds),
                f.old.gave_up,
                f.new.gave_up,
                if f.worse { "  WORSE" } else { "" }
            );
        }
    }
    for (sign, warnings) in [("+", &diff.warnings_added), ("-", &diff.warnings_cleared)] {
        for w in warnings {
            let _ = writeln!(out, "lint {sign} {} {}: {}", w.service, w.rule.code(), w.message);
        }
    }
    out
}

fn seconds(s: f64) -> String {
    format!(
        "{}",
        stormguard_core::policy::GoDuration(std::time::Duration::from_secs_f64(s))
    )
}

fn p99(p: Option<f64>) -> String {
    p.map_or("none".to_string(), |s| format!("{s:.2}s"))
}

#[cfg(test)]
mod tests;
