//! What a fleet's rate law hands on when another replica takes over its
//! pace (its owner restarted, or its ownership lapsed), or when the same
//! replica starts again: everything the law has learned (its rate and
//! phase, its judgement of the dependency, the answers, evidence and trials
//! behind it, the rate it regrows to), as plain data whose times are ages,
//! so that it crosses a store and a restart. A law taken up from a handover
//! decides as the law that wrote it would have (see the tests).
//!
//! A handover of another format, or one whose numbers could not have come
//! from a law (torn in the store, written by another version), is refused
//! with a [`Refused`] that says why, and the replica takes the published
//! rate alone, as before there were handovers.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::law::LawHandover;

/// The format of a handover this daemon writes and takes up.
pub const HANDOVER_VERSION: u32 = 1;

/// What an owner hands the next one, with the rate it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// The format ([`HANDOVER_VERSION`]).
    pub version: u32,
    pub(super) law: LawHandover,
}

/// Why a handover was not taken up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Written in another format, by another version of the daemon.
    #[error("the handover is of format {0}; this daemon takes up format {HANDOVER_VERSION}")]
    Version(u32),
    /// A number no law could have written: the record is torn or forged.
    #[error("the handover's {0} is out of range")]
    OutOfRange(&'static str),
}

impl Handover {
    /// The handover if it could have come from a law of this format.
    pub fn checked(self) -> Result<Self, Refused> {
        if self.version != HANDOVER_VERSION {
            return Err(Refused::Version(self.version));
        }
        self.law.check()?;
        Ok(self)
    }
}

/// A number a handover carries: finite and not negative, named if not.
pub(crate) fn sound(value: f64, what: &'static str) -> Result<(), Refused> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Refused::OutOfRange(what))
    }
}

/// The moment a handover is taken: times become nanoseconds before it (or,
/// for a deadline, after it), at most [`Taken::OLDEST`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) at: Instant,
}

impl Taken {
    /// The oldest time a handover tells apart: a law's memory is seconds.
    pub(crate) const OLDEST: Duration = Duration::from_secs(3600);
    /// [`OLDEST`](Self::OLDEST) in tenths of a second.
    pub(crate) const OLDEST_TENTHS: u64 = 36_000;

    /// How long before the handover `then` was.
    pub(crate) fn age(&self, then: Instant) -> u64 {
        self.nanos(self.at.saturating_duration_since(then))
    }

    /// How long after the handover `then` is.
    pub(crate) fn ahead(&self, then: Instant) -> u64 {
        self.nanos(then.saturating_duration_since(self.at))
    }

    pub(crate) fn nanos(&self, span: Duration) -> u64 {
        u64::try_from(span.min(Self::OLDEST).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A handover's times turned back into instants of this clock: it was
/// taken `age` before `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Restored {
    at: Instant,
}

impl Restored {
    pub(crate) fn new(now: Instant, age: Duration) -> Self {
        Self {
            at: now.checked_sub(age).unwrap_or(now),
        }
    }

    /// The instant `span` before the handover was taken (the handover's
    /// moment itself if this clock does not reach back so far).
    pub(crate) fn back(&self, span: Duration) -> Instant {
        self.reaches_back(span).unwrap_or(self.at)
    }

    /// The instant `span` before the handover was taken, if this clock
    /// reaches back so far.
    pub(crate) fn reaches_back(&self, span: Duration) -> Option<Instant> {
        self.at.checked_sub(span)
    }

    /// The instant `nanos` before the handover was taken.
    pub(crate) fn back_ns(&self, nanos: u64) -> Instant {
        self.back(Duration::from_nanos(nanos.min(Taken::OLDEST.as_nanos() as u64)))
    }

    /// The instant `nanos` after the handover was taken.
    pub(crate) fn ahead_ns(&self, nanos: u64) -> Instant {
        self.at + Duration::from_nanos(nanos.min(Taken::OLDEST.as_nanos() as u64))
    }
}
