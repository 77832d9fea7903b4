//! One call's sequence of decisions, as a state machine that takes the time
//! as an argument: ask for leave to send (the breaker, then the send gate),
//! send, learn from the answer, decide whether and when to retry (backoff,
//! deadline, budget), wait, and again.
//!
//! The async loop ([`run`], which [`Guard::call`](crate::guard::Guard::call)
//! runs) and the herd simulator both drive a [`Call`], so they cannot differ
//! in the order of decisions any more than in each decision. The driver owns
//! the clock and the sending; the machine owns everything else:
//!
//! ```text
//! next_at ──▶ Send ──(send it)──▶ answered_at ──▶ Succeeded | Stop
//!    ▲  │                                │
//!    │  └─▶ Wait(until) ──(wait)──┐      └─▶ Retry(delay) ──(wait)─┐
//!    └────────────────────────────┴──────────────────────────────┘
//! ```
//!
//! A call waiting in a send gate's line leaves it when dropped.
//!
//! What a call may be given besides its operation (a way to cancel it, a
//! random source, a deadline) is one value, [`Options`].

mod machine;
mod run;
#[cfg(test)]
mod tests;

pub use machine::{Answer, Answered, Call, Controls, Send, Step, Unguarded};
pub use run::{run, Options};
