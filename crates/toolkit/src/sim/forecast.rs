//! A policy run as its service's fleet would run it: how `check` forecasts
//! a service, how `simulate --policy` runs it and how `tune` scores a
//! candidate, so that the three agree.

use stormguard_core::policy::{InvalidPolicy, RetryPolicy};

use super::{run, Modifiers, Scenario, Strategy, Summary};

/// `policy`, labelled `label`, as its fleet runs it, with `modifiers`: a
/// policy whose send gate is on paces through the daemon's replicas, as the
/// client library's gate does (unless `modifiers.gates_alone`); otherwise
/// as `modifiers` say.
pub fn deployed(label: &str, policy: RetryPolicy, modifiers: Modifiers) -> Result<Strategy, InvalidPolicy> {
    let fleet = modifiers.fleet || (policy.gate.enabled && !modifiers.gates_alone);
    Strategy::from_policy(label, policy, Modifiers { fleet, ..modifiers })
}

/// Runs `policy`, labelled `label`, in `scenario` as its fleet would run it
/// (see [`deployed`]). An invalid policy runs nothing.
pub fn forecast(label: &str, policy: RetryPolicy, scenario: &Scenario) -> Result<Summary, InvalidPolicy> {
    let strategy = deployed(label, policy, Modifiers::default())?;
    Ok(Summary::of(&run(scenario, &strategy)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::policy::GatePolicy;

    #[test]
    fn a_gated_policy_paces_through_the_daemon_unless_its_gates_are_alone() {
        let gated = RetryPolicy {
            gate: GatePolicy {
                enabled: true,
                ..GatePolicy::default()
            },
            ..RetryPolicy::default()
        };
        let fleet = |policy: &RetryPolicy, modifiers| deployed("s", policy.clone(), modifiers).unwrap().fleet;
        assert!(fleet(&gated, Modifiers::default()));
        let alone = Modifiers {
            gates_alone: true,
            ..Modifiers::default()
        };
        assert!(!fleet(&gated, alone));
        assert!(
            !fleet(&RetryPolicy::default(), Modifiers::default()),
            "no gate, nothing to pace"
        );
    }
}
