//! The risks only a running fleet shows: what the processes reporting to
//! a daemon claim of their budgets.

use stormguard_core::fleet::floor::Claims;
use stormguard_core::policy::{BudgetPolicy, BudgetScope, PolicyDocument};

use super::warning::{Rule, Warning};

/// The risks only what the daemon sees of the fleet can show: `seen` holds,
/// for each service processes report calling, what they claim (how many,
/// and their first tries a second). Each service's budget is the one
/// `document` resolves for it.
pub fn live_risks(document: &PolicyDocument, seen: &[(String, Claims)]) -> Vec<Warning> {
    let mut warnings: Vec<Warning> = seen
        .iter()
        .filter_map(|(service, claims)| {
            let budget = document.resolve(service).policy.budget;
            Some(Warning {
                service: service.clone(),
                rule: Rule::ProcessFloors,
                message: process_floors(&budget, *claims)?,
            })
        })
        .collect();
    warnings.sort_by(|a, b| a.service.cmp(&b.service));
    warnings
}

/// Why a process-scoped `budget` never binds for the processes `claims`
/// describe, if it does not: their floors allow more than its ratio.
fn process_floors(budget: &BudgetPolicy, claims: Claims) -> Option<String> {
    let floor = f64::from(budget.min_retries_per_second);
    let floors = floor * claims.processes as f64;
    let ratio_allows = budget.retry_ratio * claims.requests_per_second;
    let binds = !budget.enabled || budget.scope == BudgetScope::Fleet || claims.processes < 2;
    if binds || floors <= ratio_allows {
        return None;
    }
    Some(format!(
        "the budget's floor of {} retries a second is each process's: the {} processes seen calling it may \
         retry {} a second in all whatever their traffic, while its ratio allows {} a second at the {} first \
         tries a second they send, so the budget never binds when the service fails; set `budget.scope: fleet` \
         to share one floor among them, or lower minRetriesPerSecond",
        budget.min_retries_per_second,
        claims.processes,
        round(floors),
        round(ratio_allows),
        round(claims.requests_per_second),
    ))
}

/// A figure for a message: whole above 10, one decimal below.
fn round(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}
