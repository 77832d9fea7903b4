//! The storm-risk lint: what in a *valid* policy is likely to cause or feed a
//! retry storm, why, and what to change; and, per service, what the policy
//! does to a recovering server under a thundering herd (a simulated forecast).
//!
//! A warning about a key is reported in the layer that set it: once under
//! `(defaults)` for everything services inherit, and under a service only
//! for what its own override changes.

mod calls;
mod forecast;
mod live;
mod policy;
mod reporters;
mod warning;
mod words;

use std::collections::BTreeSet;

use serde::Serialize;
use stormguard_core::policy::{ForecastScenario, PolicyDocument};

use calls::call_chain_risks;
use forecast::forecasts;
use policy::{keys_of, policy_risks};
use reporters::unknown_reporter_dependencies;

pub use forecast::{Forecast, MAX_FORECASTS};
pub use live::live_risks;
pub use policy::{retry_span, LONG_WAIT, TINY_WAIT};
pub use warning::{Rule, Warning, DEFAULTS};

/// The lint's findings for a document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lint {
    /// Every warning, by service then rule.
    pub warnings: Vec<Warning>,
    /// A forecast per service (and the defaults), while under [`MAX_FORECASTS`] distinct policies.
    pub forecasts: Vec<Forecast>,
}

/// Lints `document`, forecasting each service on the herd and fleet its
/// `forecast:` block states, as `reshape` changes them (the command line's
/// overrides; the identity for the file as it stands).
pub fn lint(document: &PolicyDocument, reshape: &dyn Fn(ForecastScenario) -> ForecastScenario) -> Lint {
    let mut warnings = Vec::new();
    let shortest = |herd: ForecastScenario| herd.outages.into_iter().min().unwrap_or_default();
    let outage = shortest(document.forecast.defaults());
    for (rule, message) in policy_risks(&document.defaults_policy(), outage) {
        warnings.push(Warning {
            service: DEFAULTS.into(),
            rule,
            message: format!("{message} (every service that does not override it inherits this)"),
        });
    }
    for name in document.services.keys() {
        let resolved = document.resolve(name);
        let own: BTreeSet<&str> = resolved.overridden.iter().map(String::as_str).collect();
        let outage = shortest(document.forecast.resolve(name));
        for (rule, message) in policy_risks(&resolved.policy, outage) {
            if keys_of(rule).iter().any(|key| own.contains(key)) {
                warnings.push(Warning {
                    service: name.clone(),
                    rule,
                    message,
                });
            }
        }
    }
    warnings.extend(call_chain_risks(document));
    warnings.extend(unknown_reporter_dependencies(document));
    warnings.sort_by(|a, b| (&a.service, a.rule).cmp(&(&b.service, b.rule)));
    Lint {
        warnings,
        forecasts: forecasts(document, reshape),
    }
}

#[cfg(test)]
mod tests;
