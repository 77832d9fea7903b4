//! `POST /v1/pace`: a process whose send gate is on asks for its share of a
//! dependency's rate, with what its gate saw since its last ask; the daemon
//! answers with a rate and how long it holds. See [`crate::fleet`]. A
//! process whose fleet-scoped breaker is open asks too, for a trial slot
//! (see [`crate::fleet::breaker`]): the pace's exchange, because it is
//! already a per-dependency ask and answer every 100 ms with a lease,
//! which a slot needs; reports are one-way and batched seconds apart.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::count;

use super::report::{check_instance, FieldError};
use crate::breaker::CircuitState;
use crate::fleet::breaker::{BreakerReport, BreakerVerdict};
use crate::policy::{check_service_name, Criticality};

/// A process's ask: its gate's tally for one dependency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PaceAsk<'a> {
    /// The dependency.
    #[serde(borrow)]
    pub service: Cow<'a, str>,
    /// The asking process (its pod name): its share is kept under this name.
    #[serde(borrow)]
    pub instance: Cow<'a, str>,
    /// Attempts its gate let through since its last ask.
    #[serde(deserialize_with = "count::whole")]
    pub sent: u64,
    /// Of the attempts answered since, those accepted...
    #[serde(deserialize_with = "count::whole")]
    pub accepted: u64,
    /// ...and those refused or timed out...
    #[serde(deserialize_with = "count::whole")]
    pub overloaded: u64,
    /// ...of which these timed out (absent from older clients: none).
    #[serde(default, deserialize_with = "count::whole")]
    pub timed_out: u64,
    /// Calls waiting for a turn now.
    #[serde(deserialize_with = "count::whole")]
    pub waiting: u64,
    /// By class, the calls its gate shed since its last ask, their turn
    /// too far off: demand it could not serve (absent from older clients,
    /// or when none were: none).
    #[serde(
        default,
        deserialize_with = "count::by_name",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub shed: BTreeMap<Cow<'a, str>, u64>,
    /// By class (`critical`, `default`, `sheddable`), the calls that asked
    /// for a turn since its last ask plus those waiting now: in proportion
    /// to these the daemon counts the process's want as each class's, and
    /// gives the fleet's rate to more critical classes first. Absent (from
    /// older clients, or when every call is of the default class): all
    /// `default`. A class this daemon does not know is left out, and counted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demand: BTreeMap<String, f64>,
    /// Whether the gate is off, watching: the counts are of every attempt
    /// sent since it heard a refusal (absent from older clients: on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watching: bool,
    /// Whether the gate is off and not watching (or the policy has none):
    /// the process asks for its breaker alone, and its counts say nothing.
    /// Without a breaker, such an ask gets no share.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gate_off: bool,
    /// Its fleet-scoped breaker, while open or with trials to report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerAsk>,
}

/// A fleet-scoped breaker's part of an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BreakerAsk {
    /// Whether the breaker is open (or half-open alone).
    pub open: bool,
    /// Milliseconds since it last opened from closed.
    #[serde(deserialize_with = "count::whole")]
    pub open_for_ms: u64,
    /// Calls it refused since the last ask.
    #[serde(default, deserialize_with = "count::whole")]
    pub refused: u64,
    /// Trials sent on the daemon's slots that succeeded since the last ask...
    #[serde(default, deserialize_with = "count::whole")]
    pub trials_succeeded: u64,
    /// ...and that failed (or were slow).
    #[serde(default, deserialize_with = "count::whole")]
    pub trials_failed: u64,
}

/// The daemon's word on the fleet's breaker, in a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerGrant {
    /// `closed`: close the breaker. `half-open`: send the trials granted,
    /// if any, within the lease. `open`: stay open.
    pub state: CircuitState,
    /// Trial slots this answer grants (0 or 1).
    pub trials: u32,
    /// While open: milliseconds until the fleet's breaker goes half-open,
    /// or until this process's turn to close.
    pub retry_in_ms: u64,
}

impl From<BreakerAsk> for BreakerReport {
    fn from(ask: BreakerAsk) -> Self {
        let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        BreakerReport {
            open: ask.open,
            open_for: Duration::from_millis(ask.open_for_ms),
            refused: count(ask.refused),
            succeeded: count(ask.trials_succeeded),
            failed: count(ask.trials_failed),
        }
    }
}

impl From<BreakerReport> for BreakerAsk {
    fn from(report: BreakerReport) -> Self {
        BreakerAsk {
            open: report.open,
            open_for_ms: report.open_for.as_millis().try_into().unwrap_or(u64::MAX),
            refused: u64::from(report.refused),
            trials_succeeded: u64::from(report.succeeded),
            trials_failed: u64::from(report.failed),
        }
    }
}

impl From<BreakerVerdict> for BreakerGrant {
    fn from(verdict: BreakerVerdict) -> Self {
        BreakerGrant {
            state: verdict.state,
            trials: verdict.trials,
            retry_in_ms: verdict.retry_in.as_millis().try_into().unwrap_or(u64::MAX),
        }
    }
}

impl From<BreakerGrant> for BreakerVerdict {
    fn from(grant: BreakerGrant) -> Self {
        BreakerVerdict {
            state: grant.state,
            trials: grant.trials,
            retry_in: Duration::from_millis(grant.retry_in_ms),
        }
    }
}

/// The daemon's answer: the process's share.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaceGrant {
    /// Attempts per second the process may send to the dependency.
    pub rate: f64,
    /// How long the grant holds, in milliseconds; after it, the process
    /// paces by its own gate until its next grant.
    pub lease_ms: u64,
    /// How often to ask while the gate is on, in milliseconds.
    pub ask_every_ms: u64,
    /// Whether the daemon holds the fleet back (the dependency is down,
    /// overloaded or slow, not failing a share at random): a watching gate
    /// turns on and paces at `rate`.
    #[serde(default)]
    pub pace: bool,
    /// The fleet's breaker, if the ask reported a fleet-scoped one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerGrant>,
    /// Whether this daemon reads an ask's classes (`demand` and `shed`): a
    /// process sends them only to one that said so, as a daemon that
    /// predates them refuses an ask with fields it does not know.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub classes: bool,
}

impl PaceAsk<'_> {
    /// The rules the JSON types alone cannot say: the names, and that the
    /// timeouts are among the overloads they are counted in (more would
    /// leave the fleet's law a negative count of refusals).
    pub fn check(&self) -> Result<(), FieldError> {
        check_service_name(&self.service).map_err(|e| FieldError::at("service", e))?;
        check_instance(&self.instance).map_err(|e| FieldError::at("instance", e))?;
        if let Some((class, number)) = self.demand.iter().find(|(_, n)| !(n.is_finite() && **n >= 0.0)) {
            return Err(FieldError::at(
                format!("demand.{class}"),
                format!("{number} is not a number of calls: a demand is finite and not negative"),
            ));
        }
        if self.timed_out > self.overloaded {
            return Err(FieldError::at(
                "timedOut",
                format!(
                    "{} is more than overloaded ({}): timeouts are counted among the overloaded",
                    self.timed_out, self.overloaded
                ),
            ));
        }
        Ok(())
    }
}

impl PaceAsk<'_> {
    /// The demand and the calls shed of each class this daemon knows, in
    /// [`Criticality::ALL`]'s order, and the names of the classes it does
    /// not know, left out. Check the ask first.
    pub fn by_class(&self) -> ByClass<'_> {
        let mut by = ByClass::default();
        for (name, &number) in &self.demand {
            match Criticality::from_name(name) {
                Some(class) => by.demand[class.rank()] += number,
                None => by.unknown.push(name),
            }
        }
        for (name, &count) in &self.shed {
            match Criticality::from_name(name) {
                Some(class) => by.shed[class.rank()] += count,
                None if !self.demand.contains_key(name.as_ref()) => by.unknown.push(name),
                None => {}
            }
        }
        by
    }

    /// The demand and calls shed of a gate's `tally`, by class name, as an
    /// ask carries them: the demand only while some call is of a class
    /// other than the default (a daemon that predates classes reads no
    /// more), the shed only for classes that shed any.
    pub fn classes_of(
        tally: &crate::gate::Tally,
    ) -> (BTreeMap<String, f64>, BTreeMap<Cow<'static, str>, u64>) {
        let classed = tally.demand[0] > 0.0 || tally.demand[2] > 0.0;
        let named = Criticality::ALL.iter().map(|class| class.name().to_owned());
        let demand = named.clone().zip(tally.demand).filter(|_| classed).collect();
        let shed = named
            .map(Cow::Owned)
            .zip(tally.shed)
            .filter(|&(_, count)| count > 0)
            .collect();
        (demand, shed)
    }
}

/// An ask's classes, as this daemon knows them.
#[derive(Debug, Default, PartialEq)]
pub struct ByClass<'a> {
    /// Each class's demand, in [`Criticality::ALL`]'s order.
    pub demand: [f64; 3],
    /// Each class's calls shed.
    pub shed: [u64; 3],
    /// The classes this daemon does not know, left out.
    pub unknown: Vec<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_is_read_with_its_names_checked() {
        let json = r#"{"service":"payments","instance":"checkout-7f9c4-abcde","sent":3,"accepted":2,"overloaded":1,"timedOut":1,"waiting":40}"#;
        let ask: PaceAsk = serde_json::from_str(json).unwrap();
        assert_eq!(
            (ask.sent, ask.accepted, ask.overloaded, ask.timed_out, ask.waiting),
            (3, 2, 1, 1, 40)
        );
        assert!(ask.check().is_ok());
        assert_eq!(serde_json::to_string(&ask).unwrap(), json);
        let older =
            r#"{"service":"payments","instance":"p","sent":3,"accepted":2,"overloaded":1,"waiting":40}"#;
        assert_eq!(serde_json::from_str::<PaceAsk>(older).unwrap().timed_out, 0);

        let bad = PaceAsk {
            service: "Not A Name".into(),
            ..ask.clone()
        };
        assert_eq!(bad.check().unwrap_err().path, "service");
        let nameless = PaceAsk {
            instance: "".into(),
            ..ask.clone()
        };
        assert_eq!(nameless.check().unwrap_err().path, "instance");
        let timeouts_beyond = PaceAsk {
            overloaded: 1,
            timed_out: 2,
            ..ask
        };
        let error = timeouts_beyond.check().unwrap_err();
        assert_eq!(error.path, "timedOut");
        assert!(error.message.contains("more than overloaded (1)"), "{error}");
        let unknown =
            r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":0,"rate":1e9}"#;
        assert!(serde_json::from_str::<PaceAsk>(unknown).is_err());
    }

    #[test]
    fn an_asks_classes_are_read_by_name_checked_and_unknown_ones_left_out() {
        let json = r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":2,"shed":{"sheddable":7,"urgent":1},"demand":{"critical":3.5,"default":1,"urgent":2}}"#;
        let ask: PaceAsk = serde_json::from_str(json).unwrap();
        assert!(ask.check().is_ok());
        let by = ask.by_class();
        assert_eq!((by.demand, by.shed), ([3.5, 1.0, 0.0], [0, 0, 7]));
        assert_eq!(by.unknown, ["urgent"], "named once, though in both");
        let negative = r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":0,"demand":{"critical":-1}}"#;
        let error = serde_json::from_str::<PaceAsk>(negative)
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(error.path, "demand.critical");
        assert!(error.message.contains("-1"), "{error}");
        let fraction = r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":0,"shed":{"critical":0.5}}"#;
        assert!(serde_json::from_str::<PaceAsk>(fraction).is_err());

        let mut tally = crate::gate::Tally {
            demand: [0.0, 4.0, 0.0],
            ..Default::default()
        };
        let (demand, shed) = PaceAsk::classes_of(&tally);
        assert!(
            demand.is_empty() && shed.is_empty(),
            "all default: nothing an older daemon cannot read"
        );
        tally.demand[0] = 1.0;
        tally.shed[1] = 2;
        let (demand, shed) = PaceAsk::classes_of(&tally);
        assert_eq!(demand.len(), 3);
        assert_eq!(demand["critical"], 1.0);
        assert_eq!(shed.into_iter().collect::<Vec<_>>(), [("default".into(), 2)]);
    }

    #[test]
    fn a_breakers_ask_and_grant_round_trip_and_older_peers_read_without_them() {
        let json = r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"timedOut":0,"waiting":0,"gateOff":true,"breaker":{"open":true,"openForMs":1500,"refused":4,"trialsSucceeded":1,"trialsFailed":0}}"#;
        let ask: PaceAsk = serde_json::from_str(json).unwrap();
        assert!(ask.gate_off);
        let report = BreakerReport::from(ask.breaker.unwrap());
        assert_eq!(
            (report.open_for, report.succeeded),
            (Duration::from_millis(1500), 1)
        );
        assert_eq!(BreakerAsk::from(report), ask.breaker.unwrap());
        assert_eq!(serde_json::to_string(&ask).unwrap(), json);

        let grant = PaceGrant {
            rate: 0.0,
            lease_ms: 1000,
            ask_every_ms: 100,
            pace: false,
            breaker: Some(BreakerGrant {
                state: CircuitState::HalfOpen,
                trials: 1,
                retry_in_ms: 0,
            }),
            classes: false,
        };
        let text = serde_json::to_string(&grant).unwrap();
        assert!(
            text.contains(r#""breaker":{"state":"half-open","trials":1,"retryInMs":0}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<PaceGrant>(&text).unwrap(), grant);
        let older = r#"{"rate":2.0,"leaseMs":1000,"askEveryMs":100}"#;
        assert_eq!(serde_json::from_str::<PaceGrant>(older).unwrap().breaker, None);
        let bad = r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":0,"breaker":{"open":true,"openForMs":-1}}"#;
        assert!(serde_json::from_str::<PaceAsk>(bad).is_err());
    }
}
