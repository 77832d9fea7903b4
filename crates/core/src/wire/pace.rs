//! `POST /v1/pace`: a process whose send gate is on asks for its share of a
//! dependency's rate, with what its gate saw since its last ask; the daemon
//! answers with a rate and how long it holds. See [`crate::fleet`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::count;

use super::report::{check_instance, FieldError};
use crate::policy::check_service_name;

/// A process's ask: its gate's tally for one dependency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Whether the gate is off, watching: the counts are of every attempt
    /// sent since it heard a refusal (absent from older clients: on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watching: bool,
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
}

impl PaceAsk<'_> {
    /// The rules the JSON types alone cannot say: the names.
    pub fn check(&self) -> Result<(), FieldError> {
        check_service_name(&self.service).map_err(|e| FieldError::at("service", e))?;
        check_instance(&self.instance).map_err(|e| FieldError::at("instance", e))
    }
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
            ..ask
        };
        assert_eq!(nameless.check().unwrap_err().path, "instance");
        let unknown =
            r#"{"service":"a","instance":"p","sent":0,"accepted":0,"overloaded":0,"waiting":0,"rate":1e9}"#;
        assert!(serde_json::from_str::<PaceAsk>(unknown).is_err());
    }
}
