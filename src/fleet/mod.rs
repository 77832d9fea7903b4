//! The daemon's fleet-wide state, one room a concern: the pace of each
//! gated dependency (`pace`), the half-open of each fleet-scoped breaker
//! (`breakers`), and the floor of each fleet-scoped retry budget
//! (`budgets`), with how much of each it keeps at most (`capacity`); and
//! the exchanges that keep the pace and the breakers in step with the
//! other replicas' through a shared store (`sharing`).

pub mod breakers;
pub mod budgets;
pub mod capacity;
mod pace;
pub mod sharing;

pub use breakers::FleetBreakers;
pub use budgets::FleetBudgets;
pub use pace::{Fleet, PaceStatus, Refused};
