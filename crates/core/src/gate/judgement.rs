//! What a rate law believes of the dependency it paces, for the operator
//! who asks why a dependency is paced: the verdict that sets the rate, and
//! the share of answers refused that it rests on.

use std::fmt;
use std::time::Duration;

/// How recent a verdict or a refusal must be to count: the three seconds
/// of answers a rate law remembers.
pub(crate) const RECENT: Duration = Duration::from_secs(3);

/// What paces a dependency now, as the rate law sees it. It serializes as
/// its [name](Judgement::as_str).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// Nothing has been accepted since pacing began: the rate probes at
    /// its lowest.
    Down,
    /// A refusal within the last three seconds was taken for overload: the
    /// rate follows what the dependency accepts.
    Overloaded,
    /// An attempt timed out within the last three seconds: the rate follows
    /// what the dependency answers in time.
    Slow,
    /// Refusals within the last three seconds, none taken for overload
    /// (`overloadWhen: most-refused`, while acceptances outnumber them):
    /// the rate stays at least twice what the dependency accepts.
    FailingAtRandom,
    /// Nothing refused for three seconds: the rate grows back towards what
    /// the callers want, and pacing ends once nobody waits.
    Recovering,
}

impl Judgement {
    /// Every judgement, in the order the metrics list them.
    pub const ALL: [Judgement; 5] = [
        Judgement::Down,
        Judgement::Overloaded,
        Judgement::Slow,
        Judgement::FailingAtRandom,
        Judgement::Recovering,
    ];

    /// Its name in metrics and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Down => "down",
            Judgement::Overloaded => "overloaded",
            Judgement::Slow => "slow",
            Judgement::FailingAtRandom => "failing_at_random",
            Judgement::Recovering => "recovering",
        }
    }

    /// Whether the pace holds the dependency below what it takes: down,
    /// overloaded or slow. Pacing that is failing at random or recovering
    /// holds a rate the dependency serves.
    pub fn holds_back(self) -> bool {
        matches!(self, Judgement::Down | Judgement::Overloaded | Judgement::Slow)
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A judgement, with the answers it rests on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    /// What paces the dependency.
    pub judgement: Judgement,
    /// Of the answers over the last three seconds, the share refused (0
    /// to 1; 0 with no answers).
    pub refused_share: f64,
    /// Attempts accepted over the last second, per second.
    pub delivered: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_its_name() {
        for judgement in Judgement::ALL {
            let json = serde_json::to_string(&judgement).unwrap();
            assert_eq!(json, format!("\"{}\"", judgement.as_str()));
        }
    }
}
