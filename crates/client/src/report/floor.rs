//! A fleet-scoped retry budget's floor in this process: the part of the
//! fleet's floor the daemon gave in its last answer to a report, or, while
//! reports cannot be delivered, the fallback [`LocalFloor`] says. The part
//! arrives with the report's answer, off the call path: a call only reads
//! the floor its budget holds.

use stormguard_core::fleet::floor::{LocalFloor, Part};
use stormguard_core::guard::Guard;
use stormguard_core::policy::BudgetScope;

/// One dependency's floor, while its budget is fleet-scoped.
#[derive(Debug, Clone, Copy)]
pub(super) struct FleetFloor {
    configured: u32,
    local: LocalFloor,
    /// The floor the budget holds now.
    applied: f64,
    answered: bool,
}

impl FleetFloor {
    /// The floor for `guard`'s budget, following `previous` (the floor of
    /// the budget it replaces) while the configured floor is the same: a
    /// new policy version does not forget the daemon's last word.
    pub(super) fn follow(previous: Option<Self>, guard: &Guard) -> Option<Self> {
        let budget = &guard.policy().budget;
        if !(budget.enabled && budget.scope == BudgetScope::Fleet) {
            return None;
        }
        let configured = budget.min_retries_per_second;
        let floor = match previous {
            Some(previous) if previous.configured == configured => previous,
            _ => {
                let local = LocalFloor::new(f64::from(configured));
                Self {
                    configured,
                    local,
                    applied: local.initial(),
                    answered: false,
                }
            }
        };
        floor.apply(guard);
        Some(floor)
    }

    /// The daemon answered `part`.
    pub(super) fn answered(&mut self, part: Part, guard: &Guard) {
        self.applied = self.local.answered(part);
        self.answered = true;
        self.apply(guard);
    }

    /// A report could not be delivered.
    pub(super) fn unreachable(&mut self, guard: &Guard) {
        self.applied = self.local.unreachable();
        self.apply(guard);
    }

    /// Whether the daemon has answered a part since this budget's floor was configured.
    pub(super) fn answered_once(&self) -> bool {
        self.answered
    }

    fn apply(&self, guard: &Guard) {
        if let Some(budget) = guard.budget() {
            budget.set_min_retries_per_second(self.applied);
        }
    }
}
