//! Reports: a process's counts per dependency since its last report, and
//! its states now.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::count;

use crate::breaker::CircuitState;
use crate::fleet::floor::Part;
use crate::policy::check_service_name;

/// Longest instance name (a Kubernetes pod name is at most 253 characters).
pub const MAX_INSTANCE_LEN: usize = 253;
/// Longest endpoint name.
pub const MAX_ENDPOINT_LEN: usize = 256;
/// Most reports one request may carry.
pub const MAX_BATCH: usize = 1000;

/// Counts since the sender's last report, and its current states. Strings
/// borrow from the body where they can: the daemon decodes one per request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Report<'a> {
    /// The dependency called.
    #[serde(borrow)]
    pub service: Cow<'a, str>,
    /// The reporting process.
    #[serde(borrow)]
    pub instance: Cow<'a, str>,
    /// The calling service, if the sender says.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Cow<'a, str>>,
    /// Counts per endpoint of the dependency.
    #[serde(default, borrow)]
    pub endpoints: Vec<EndpointCounts<'a>>,
    /// Calls in flight now.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "count::optional"
    )]
    pub in_flight: Option<u64>,
    /// The sender's breaker state for the dependency now.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "circuit_state")]
    pub circuit_state: Option<CircuitState>,
    /// The sender's retry budget for the dependency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetReport>,
    /// Whether the sender's send gate for the dependency is on now: `None`
    /// when its policy has no gate. Only a policy with a gate sends it, and
    /// only a daemon that knows this field serves such a policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_on: Option<bool>,
    /// The time the counts cover, in milliseconds: since the sender took
    /// its previous report. Sent for a dependency whose retry budget is
    /// fleet-scoped (which only a daemon that knows this field serves), so
    /// that the daemon takes the sender's request rate from it rather than
    /// from when reports arrive.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "count::optional"
    )]
    pub span_ms: Option<u64>,
}

/// One endpoint's counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointCounts<'a> {
    /// The endpoint, e.g. `/charge`.
    #[serde(borrow)]
    pub endpoint: Cow<'a, str>,
    /// Attempts by outcome.
    #[serde(default)]
    pub requests: StatusCounts,
    /// Retries by attempt number (1 = the first retry), as decimal strings.
    #[serde(default, deserialize_with = "count::by_name")]
    pub retries: BTreeMap<Cow<'a, str>, u64>,
}

/// Attempts by outcome, labelled as the `status` of `http_client_requests_total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCounts {
    /// Answered, with anything but a 5xx.
    #[serde(default, deserialize_with = "count::whole")]
    pub success: u64,
    /// No answer (connect error, timeout, reset).
    #[serde(default, deserialize_with = "count::whole")]
    pub error: u64,
    /// Answered 5xx.
    #[serde(default, deserialize_with = "count::whole")]
    pub server_error: u64,
}

/// The sender's retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BudgetReport {
    /// Retries the budget refused since the last report.
    #[serde(default, deserialize_with = "count::whole")]
    pub retries_denied: u64,
    /// Share of the budget left now, in [0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_ratio: Option<f64>,
}

/// A process's reports, sent together under an id: the daemon counts a
/// batch once, however often it is sent. The daemon also accepts a bare
/// report or a bare array of them (without an id, a resend counts again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReportBatch<'a, R> {
    /// The reporting process; every report in the batch names it too.
    #[serde(borrow)]
    pub instance: Cow<'a, str>,
    /// The batch's number: one more for each new batch of a process run.
    /// It starts at a random number in each run, so a restarted process
    /// (same pod name) does not repeat an earlier run's numbers.
    #[serde(deserialize_with = "count::whole")]
    pub sequence: u64,
    /// One report per dependency.
    pub reports: Vec<R>,
}

/// The daemon's answer to reports it read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportAnswer {
    /// Reports counted.
    pub accepted: usize,
    /// True when this batch id was counted before: nothing was counted again.
    #[serde(default)]
    pub duplicate: bool,
    /// Reports refused, each with its reason; the others were counted.
    #[serde(default)]
    pub rejected: Vec<Rejected>,
    /// For each counted report, in order, what the cardinality guard folded.
    #[serde(default)]
    pub folded: Vec<Folded>,
    /// For each reported dependency whose retry budget is fleet-scoped,
    /// this process's part of the fleet's floor, by dependency. An entry
    /// that is not a part (a field missing, not a number, a negative count)
    /// is left out, the others kept.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "readable_parts"
    )]
    pub fleet_budgets: BTreeMap<String, FloorPart>,
}

/// The entries of `fleetBudgets` that are parts.
fn readable_parts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, FloorPart>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Part(FloorPart),
        Other(serde::de::IgnoredAny),
    }
    let entries = BTreeMap::<String, Entry>::deserialize(d)?;
    Ok(entries
        .into_iter()
        .filter_map(|(service, entry)| match entry {
            Entry::Part(part) if part.min_retries_per_second.is_finite() => Some((service, part)),
            _ => None,
        })
        .collect())
}

/// A process's part of a fleet-scoped retry budget's floor: its budget's
/// `minRetriesPerSecond` until the next answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FloorPart {
    /// Retries a second always allowed to this process.
    pub min_retries_per_second: f64,
    /// Processes the floor is divided among, this one included.
    pub processes: u64,
}

impl From<Part> for FloorPart {
    fn from(part: Part) -> Self {
        Self {
            min_retries_per_second: part.per_second,
            processes: part.processes,
        }
    }
}

impl From<FloorPart> for Part {
    fn from(part: FloorPart) -> Self {
        Self {
            per_second: part.min_retries_per_second,
            processes: part.processes,
        }
    }
}

/// A report the daemon refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// Its place in the batch, from 0.
    pub index: usize,
    /// The field at fault, e.g. `[3].endpoints[0].requests.success`.
    pub path: String,
    /// What is wrong with it.
    pub error: String,
}

/// What a report lost to the daemon's cardinality guard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// The service was counted as `other`.
    pub service: bool,
    /// Endpoints counted as `other`.
    pub endpoints: usize,
    /// Attempt numbers counted as `other`.
    pub attempts: usize,
    /// The instance's states were not kept: too many instances.
    pub instance_dropped: bool,
}

impl Folded {
    /// Whether the report lost nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A field that breaks a rule: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, e.g. `endpoints[0].endpoint` (`.` for the whole body).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for FieldError {}

impl FieldError {
    /// An error at `path`.
    pub fn at(path: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self {
            path: path.into(),
            message: message.to_string(),
        }
    }

    /// The error as seen from an enclosing `prefix` (`[3]` for a batch's fourth report).
    pub fn within(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.path = match self.path.as_str() {
                "." => prefix.to_string(),
                path => format!("{prefix}.{path}"),
            };
        }
        self
    }
}

/// A name whose length is out of its range: an instance's or an endpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {max} characters{what}, found {found}")]
pub struct BadLength {
    /// The most characters allowed.
    pub max: usize,
    /// How many it has.
    pub found: usize,
    /// What the name is, for the message (` (the pod name)`), or empty.
    what: &'static str,
}

/// Checks an instance name: 1 to [`MAX_INSTANCE_LEN`] characters.
pub fn check_instance(instance: &str) -> Result<(), BadLength> {
    check_length(instance, MAX_INSTANCE_LEN, " (the pod name)")
}

/// Checks an endpoint name: 1 to [`MAX_ENDPOINT_LEN`] characters.
pub fn check_endpoint(endpoint: &str) -> Result<(), BadLength> {
    check_length(endpoint, MAX_ENDPOINT_LEN, "")
}

fn check_length(name: &str, max: usize, what: &'static str) -> Result<(), BadLength> {
    let found = name.chars().count();
    if (1..=max).contains(&found) {
        return Ok(());
    }
    Err(BadLength { max, found, what })
}

impl Report<'_> {
    /// The rules the JSON types alone cannot say: names, lengths, attempt
    /// numbers and the budget's range.
    pub fn check(&self) -> Result<(), FieldError> {
        check_service_name(&self.service).map_err(|e| FieldError::at("service", e))?;
        if let Some(caller) = &self.caller {
            check_service_name(caller).map_err(|e| FieldError::at("caller", e))?;
        }
        check_instance(&self.instance).map_err(|e| FieldError::at("instance", e))?;
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            let at = |field: &str| format!("endpoints[{i}].{field}");
            check_endpoint(&endpoint.endpoint).map_err(|e| FieldError::at(at("endpoint"), e))?;
            if let Some(bad) = endpoint.retries.keys().find(|a| !is_attempt_number(a)) {
                return Err(FieldError::at(
                    at("retries"),
                    format!("{bad:?} is not an attempt number: use \"1\" for the first retry, \"2\" for the second, ..."),
                ));
            }
        }
        if let Some(ratio) = self.budget.and_then(|b| b.remaining_ratio) {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(FieldError::at(
                    "budget.remainingRatio",
                    format!("{ratio} is not a share in [0, 1]"),
                ));
            }
        }
        Ok(())
    }
}

/// `1`, `2`, ... up to 999,999,999, in plain decimal (no sign, no leading
/// zero): nine digits at most, which a JSON Schema pattern can say too.
fn is_attempt_number(text: &str) -> bool {
    text.len() <= 9 && matches!(text.parse::<u32>(), Ok(n) if n >= 1 && text == n.to_string())
}

/// A breaker state as reports spell it: `closed`, `half-open`, `open`.
mod circuit_state {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::breaker::CircuitState;

    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    enum Name {
        Closed,
        HalfOpen,
        Open,
    }

    pub fn serialize<S: Serializer>(state: &Option<CircuitState>, s: S) -> Result<S::Ok, S::Error> {
        match state {
            Some(state) => s.serialize_str(state.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CircuitState>, D::Error> {
        Ok(Option::<Name>::deserialize(d)?.map(|name| match name {
            Name::Closed => CircuitState::Closed,
            Name::HalfOpen => CircuitState::HalfOpen,
            Name::Open => CircuitState::Open,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_may_carry_a_zero_fraction_but_nothing_else() {
        fn read(json: &str) -> serde_json::Result<Report<'_>> {
            serde_json::from_str(json)
        }
        let whole = read(r#"{"service":"a","instance":"p","inFlight":4.0,"endpoints":[{"endpoint":"/x","requests":{"success":120.0},"retries":{"1":9.0}}]}"#)
            .unwrap();
        assert_eq!(whole.in_flight, Some(4));
        assert_eq!(whole.endpoints[0].requests.success, 120);
        assert_eq!(whole.endpoints[0].retries["1"], 9);
        for bad in ["4.5", "-1", "1e20", "\"4\""] {
            let json = format!(r#"{{"service":"a","instance":"p","inFlight":{bad}}}"#);
            let error = read(&json).unwrap_err().to_string();
            assert!(
                error.contains("whole number") || error.contains("negative"),
                "{bad}: {error}"
            );
        }
        let ask: PaceAskForTest = serde_json::from_str(
            r#"{"service":"a","instance":"p","sent":3.0,"accepted":2,"overloaded":1.0,"waiting":0.0}"#,
        )
        .unwrap();
        assert_eq!((ask.sent, ask.overloaded), (3, 1));
    }

    type PaceAskForTest<'a> = super::super::PaceAsk<'a>;

    #[test]
    fn names_are_measured_in_characters_not_bytes() {
        assert!(
            check_instance(&"é".repeat(MAX_INSTANCE_LEN)).is_ok(),
            "253 characters, 506 bytes"
        );
        assert!(check_instance(&"é".repeat(MAX_INSTANCE_LEN + 1)).is_err());
        assert!(check_endpoint(&"/é".repeat(MAX_ENDPOINT_LEN / 2)).is_ok());
        assert!(is_attempt_number("999999999") && !is_attempt_number("1000000000"));
    }

    #[test]
    fn a_report_written_by_one_side_reads_the_same_on_the_other() {
        let report = Report {
            service: "payment-service".into(),
            instance: "checkout-7f9c4-abcde".into(),
            caller: Some("checkout".into()),
            endpoints: vec![EndpointCounts {
                endpoint: "/charge".into(),
                requests: StatusCounts {
                    success: 120,
                    error: 3,
                    server_error: 7,
                },
                retries: [("1".into(), 9), ("2".into(), 1)].into_iter().collect(),
            }],
            in_flight: Some(4),
            circuit_state: Some(CircuitState::HalfOpen),
            budget: Some(BudgetReport {
                retries_denied: 2,
                remaining_ratio: Some(0.4),
            }),
            gate_on: Some(true),
            span_ms: None,
        };
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains(r#""circuitState":"half-open""#), "{json}");
        assert!(json.contains(r#""gateOn":true"#), "{json}");
        assert!(
            json.contains(r#""inFlight":4"#) && json.contains(r#""server_error":7"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
        report.check().unwrap();
    }

    #[test]
    fn a_batch_carries_its_id_beside_its_reports() {
        let batch = ReportBatch {
            instance: "pod".into(),
            sequence: 7,
            reports: vec![serde_json::json!({"service": "a", "instance": "pod"})],
        };
        let json = serde_json::to_value(&batch).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"instance": "pod", "sequence": 7, "reports": [{"service": "a", "instance": "pod"}]})
        );
    }

    #[test]
    fn names_are_checked_where_they_enter() {
        assert!(check_instance("").is_err());
        assert!(check_instance(&"x".repeat(MAX_INSTANCE_LEN + 1)).is_err());
        assert!(check_instance("checkout-7f9c4-abcde").is_ok());
        assert!(check_endpoint("").is_err());
        for attempt in ["0", "01", "-1", "+1", "x"] {
            assert!(!is_attempt_number(attempt), "{attempt}");
        }
        assert!(is_attempt_number("12"));
    }

    #[test]
    fn paths_nest_inside_a_batch() {
        assert_eq!(FieldError::at("service", "bad").within("[3]").path, "[3].service");
        assert_eq!(FieldError::at(".", "bad").within("[3]").path, "[3]");
        assert_eq!(FieldError::at("service", "bad").within("").path, "service");
    }

    #[test]
    fn an_answer_keeps_the_parts_it_can_read_and_leaves_out_the_rest() {
        let answer: ReportAnswer = serde_json::from_str(
            r#"{"accepted": 3, "rejected": [], "folded": [], "fleetBudgets": {
                "ledger": {"minRetriesPerSecond": 2.5, "processes": 4},
                "orders": {"minRetriesPerSecond": null, "processes": 4},
                "search": {"minRetriesPerSecond": 1, "processes": -1},
                "stock": {"processes": 4},
                "cart": "half",
                "later": {"minRetriesPerSecond": 0.5, "processes": 2, "since": 1}}}"#,
        )
        .expect("an answer with unreadable parts is still an answer");
        assert_eq!(answer.accepted, 3);
        let parts: Vec<&str> = answer.fleet_budgets.keys().map(String::as_str).collect();
        assert_eq!(
            parts,
            ["later", "ledger"],
            "fields it does not know are no reason to drop a part"
        );
        assert_eq!(
            answer.fleet_budgets["ledger"],
            FloorPart {
                min_retries_per_second: 2.5,
                processes: 4
            }
        );
        let report: Report<'_> =
            serde_json::from_str(r#"{"service": "ledger", "instance": "pod-1", "spanMs": 10000.0}"#).unwrap();
        assert_eq!(report.span_ms, Some(10_000));
    }
}
