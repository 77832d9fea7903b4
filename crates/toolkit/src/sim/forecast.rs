//! A policy run as its service's fleet would run it: how `check` forecasts
//! a service and how `tune` scores a candidate, so that the two agree.

use stormguard_core::policy::{InvalidPolicy, RetryPolicy};

use super::{run, Modifiers, Scenario, Strategy, Summary};

/// With a send gate, a forecast deals the clients into this many processes
/// paced through the daemon: a gate is per process, and the daemon paces a
/// fleet, so a process per client would forecast neither.
pub const PACED_PROCESSES: u32 = 50;

/// Runs `policy`, labelled `label`, in `scenario`: with its send gate on,
/// the clients are dealt into [`PACED_PROCESSES`] processes pacing through
/// the daemon; otherwise as `scenario` says. An invalid policy runs nothing.
pub fn forecast(label: &str, policy: RetryPolicy, scenario: &Scenario) -> Result<Summary, InvalidPolicy> {
    let paced = policy.gate.enabled;
    let modifiers = Modifiers {
        fleet: paced,
        ..Modifiers::default()
    };
    let strategy = Strategy::from_policy(label, policy, modifiers)?;
    let scenario = Scenario {
        processes: if paced {
            PACED_PROCESSES
        } else {
            scenario.processes
        },
        ..scenario.clone()
    };
    Ok(Summary::of(&run(&scenario, &strategy)))
}
