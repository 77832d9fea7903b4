//! A client's report (DESIGN.md's contract), decoded strictly: unknown
//! fields, negative or fractional counts, unknown statuses and circuit states
//! are errors that name the field, and a bad report changes nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use stormguard_core::policy::check_service_name;

/// Longest instance name (a Kubernetes pod name is at most 253 characters).
pub const MAX_INSTANCE_LEN: usize = 253;
/// Longest endpoint name.
pub const MAX_ENDPOINT_LEN: usize = 256;

/// Counts since the sender's last report, and its current states. Strings
/// borrow from the body where they can: a report is decoded per request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Report<'a> {
    /// The dependency called.
    #[serde(borrow)]
    pub service: Cow<'a, str>,
    /// The reporting process.
    #[serde(borrow)]
    pub instance: Cow<'a, str>,
    /// The calling service, if the sender says.
    #[serde(default, borrow)]
    pub caller: Option<Cow<'a, str>>,
    /// Counts per endpoint of the dependency.
    #[serde(default, borrow)]
    pub endpoints: Vec<EndpointCounts<'a>>,
    /// Calls in flight now.
    #[serde(default)]
    pub in_flight: Option<u64>,
    /// The sender's breaker state for the dependency now.
    #[serde(default)]
    pub circuit_state: Option<CircuitState>,
    /// The sender's retry budget for the dependency.
    #[serde(default)]
    pub budget: Option<BudgetReport>,
}

/// One endpoint's counts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointCounts<'a> {
    /// The endpoint, e.g. `/charge`.
    #[serde(borrow)]
    pub endpoint: Cow<'a, str>,
    /// Attempts by outcome.
    #[serde(default)]
    pub requests: StatusCounts,
    /// Retries by attempt number (1 = the first retry), as decimal strings.
    #[serde(default, borrow)]
    pub retries: BTreeMap<Cow<'a, str>, u64>,
}

/// Attempts by outcome, as seed 003 labels them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCounts {
    /// Answered well.
    #[serde(default)]
    pub success: u64,
    /// No answer (connect error, timeout, reset).
    #[serde(default)]
    pub error: u64,
    /// Answered 5xx.
    #[serde(default)]
    pub server_error: u64,
}

/// A breaker state as a report spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CircuitState {
    /// Calls pass.
    Closed,
    /// Trial calls pass.
    HalfOpen,
    /// Calls are refused.
    Open,
}

impl CircuitState {
    /// The `circuit_breaker_state` value: 0 closed, 1 half-open, 2 open.
    pub fn as_metric(self) -> i64 {
        match self {
            CircuitState::Closed => 0,
            CircuitState::HalfOpen => 1,
            CircuitState::Open => 2,
        }
    }
}

/// The sender's retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BudgetReport {
    /// Retries the budget refused since the last report.
    #[serde(default)]
    pub retries_denied: u64,
    /// Share of the budget left now, in [0, 1].
    #[serde(default)]
    pub remaining_ratio: Option<f64>,
}

/// Why a report was refused: what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ReportError {
    /// The field, e.g. `endpoints[0].requests.success` (`.` for the whole body).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl ReportError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The error as seen from an enclosing `prefix` (`[3]` for a batch's fourth report).
    fn within(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.path = format!("{prefix}.{}", self.path);
        }
        self
    }
}

/// Most reports one request may carry.
pub const MAX_BATCH: usize = 1000;

/// Decodes and checks one report.
pub fn decode(body: &[u8]) -> Result<Report<'_>, ReportError> {
    // The plain decoder is the fast path; a failure is decoded again with
    // path tracking, only to say where it is.
    let report = match serde_json::from_slice::<Report>(body) {
        Ok(report) => report,
        Err(_) => return Err(locate::<Report>(body)),
    };
    check(&report).map_err(|e| e.within(""))?;
    Ok(report)
}

/// Decodes and checks a body holding one report or a JSON array of them
/// (a process's reports for each service it calls, sent together). Any bad
/// report refuses the whole batch.
pub fn decode_batch(body: &[u8]) -> Result<Vec<Report<'_>>, ReportError> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'[') {
        return decode(body).map(|report| vec![report]);
    }
    let reports = match serde_json::from_slice::<Vec<Report>>(body) {
        Ok(reports) => reports,
        Err(_) => return Err(locate::<Vec<Report>>(body)),
    };
    if reports.len() > MAX_BATCH {
        return Err(ReportError::at(
            ".",
            format!("{} reports in one request; at most {MAX_BATCH}", reports.len()),
        ));
    }
    for (i, report) in reports.iter().enumerate() {
        check(report).map_err(|e| e.within(&format!("[{i}]")))?;
    }
    Ok(reports)
}

/// The error of a body the plain decoder refused, with the path to it.
fn locate<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ReportError {
    let mut json = serde_json::Deserializer::from_slice(body);
    let report = serde_path_to_error::deserialize::<_, T>(&mut json).map_err(|e| {
        // serde_path_to_error writes `?` where the error is not inside a field.
        let path = match e.path().to_string().as_str() {
            "?" | "" => ".".to_string(),
            path => path.to_string(),
        };
        ReportError::at(path, e.into_inner().to_string())
    });
    match report {
        Err(error) => error,
        Ok(_) => match json.end() {
            Err(e) => ReportError::at(".", e.to_string()),
            Ok(()) => ReportError::at(".", "the report does not decode"),
        },
    }
}

/// The rules JSON types alone cannot say.
fn check(report: &Report<'_>) -> Result<(), ReportError> {
    check_service_name(&report.service).map_err(|e| ReportError::at("service", e))?;
    if let Some(caller) = &report.caller {
        check_service_name(caller).map_err(|e| ReportError::at("caller", e))?;
    }
    if report.instance.is_empty() || report.instance.len() > MAX_INSTANCE_LEN {
        return Err(ReportError::at(
            "instance",
            format!("must be 1 to {MAX_INSTANCE_LEN} characters (the pod name)"),
        ));
    }
    for (i, endpoint) in report.endpoints.iter().enumerate() {
        let at = |field: &str| format!("endpoints[{i}].{field}");
        if endpoint.endpoint.is_empty() || endpoint.endpoint.len() > MAX_ENDPOINT_LEN {
            return Err(ReportError::at(
                at("endpoint"),
                format!("must be 1 to {MAX_ENDPOINT_LEN} characters"),
            ));
        }
        for attempt in endpoint.retries.keys() {
            if !matches!(attempt.parse::<u32>(), Ok(n) if n >= 1 && **attempt == n.to_string()) {
                return Err(ReportError::at(
                    at("retries"),
                    format!("{attempt:?} is not an attempt number: use \"1\" for the first retry, \"2\" for the second, ..."),
                ));
            }
        }
    }
    if let Some(ratio) = report.budget.and_then(|b| b.remaining_ratio) {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(ReportError::at(
                "budget.remainingRatio",
                format!("{ratio} is not a share in [0, 1]"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
        "service": "payment-service",
        "instance": "checkout-7f9c4-abcde",
        "caller": "checkout",
        "endpoints": [
            {"endpoint": "/charge",
             "requests": {"success": 120, "error": 3, "server_error": 7},
             "retries": {"1": 9, "2": 1}}
        ],
        "inFlight": 4,
        "circuitState": "open",
        "budget": {"retriesDenied": 2, "remainingRatio": 0.4}
    }"#;

    #[test]
    fn the_design_example_decodes() {
        let report = decode(GOOD.as_bytes()).unwrap();
        assert_eq!(report.service, "payment-service");
        assert_eq!(report.endpoints[0].requests.server_error, 7);
        assert_eq!(report.endpoints[0].retries["1"], 9);
        assert_eq!(report.circuit_state, Some(CircuitState::Open));
        assert_eq!(report.budget.unwrap().remaining_ratio, Some(0.4));
    }

    #[test]
    fn a_batch_is_an_array_of_reports_refused_whole_if_one_is_bad() {
        let two = format!("[{GOOD}, {{\"service\": \"b\", \"instance\": \"i\"}}]");
        let reports = decode_batch(two.as_bytes()).unwrap();
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[1].service, "b");
        let bad = format!("[{GOOD}, {{\"service\": \"b\", \"instance\": \"i\", \"inFlight\": -1}}]");
        let error = decode_batch(bad.as_bytes()).unwrap_err();
        assert_eq!(error.path, "[1].inFlight");
        let bad_name = format!("[{GOOD}, {{\"service\": \"B\", \"instance\": \"i\"}}]");
        assert_eq!(decode_batch(bad_name.as_bytes()).unwrap_err().path, "[1].service");
        let many = format!("[{}]", vec![GOOD; MAX_BATCH + 1].join(","));
        assert!(decode_batch(many.as_bytes())
            .unwrap_err()
            .message
            .contains("at most 1000"));
        assert_eq!(decode_batch(b"[]").unwrap().len(), 0);
    }

    #[test]
    fn the_minimal_report_is_a_service_and_an_instance() {
        let report = decode(br#"{"service": "a", "instance": "i"}"#).unwrap();
        assert!(report.endpoints.is_empty() && report.circuit_state.is_none());
    }

    /// Each way a report can be wrong, and the path and words its error names.
    #[test]
    fn each_malformed_report_names_its_field() {
        let cases: &[(&str, &str, &str)] = &[
            ("{", ".", "EOF"),
            ("[]", ".", "expected struct Report"),
            (r#"{"instance": "i"}"#, ".", "missing field `service`"),
            (
                r#"{"service": "a", "instance": "i", "extra": 1}"#,
                "extra",
                "unknown field `extra`",
            ),
            (
                r#"{"service": "Bad_Name", "instance": "i"}"#,
                "service",
                "DNS-1123",
            ),
            (r#"{"service": "a", "instance": ""}"#, "instance", "1 to 253"),
            (
                r#"{"service": "a", "instance": "i", "caller": "X"}"#,
                "caller",
                "DNS-1123",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "requests": {"success": -1}}]}"#,
                "endpoints[0].requests.success",
                "invalid value: integer `-1`",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "requests": {"success": 1.5}}]}"#,
                "endpoints[0].requests.success",
                "floating point `1.5`",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "requests": {"timeout": 1}}]}"#,
                "endpoints[0].requests.timeout",
                "unknown field `timeout`",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "retries": {"0": 1}}]}"#,
                "endpoints[0].retries",
                "not an attempt number",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "retries": {"01": 1}}]}"#,
                "endpoints[0].retries",
                "not an attempt number",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": ""}]}"#,
                "endpoints[0].endpoint",
                "1 to 256",
            ),
            (
                r#"{"service": "a", "instance": "i", "circuitState": "broken"}"#,
                "circuitState",
                "unknown variant `broken`",
            ),
            (
                r#"{"service": "a", "instance": "i", "circuitState": 2}"#,
                "circuitState",
                "expected value",
            ),
            (
                r#"{"service": "a", "instance": "i", "inFlight": -4}"#,
                "inFlight",
                "invalid value: integer `-4`",
            ),
            (
                r#"{"service": "a", "instance": "i", "budget": {"remainingRatio": 1.5}}"#,
                "budget.remainingRatio",
                "not a share in [0, 1]",
            ),
            (
                r#"{"service": "a", "instance": "i"} {"service": "b"}"#,
                ".",
                "trailing characters",
            ),
        ];
        for (body, path, words) in cases.iter().filter(|(body, _, _)| !body.starts_with('[')) {
            let error = decode_batch(body.as_bytes()).expect_err(body);
            assert_eq!(error.path, *path, "as a batch body: {body}: {error}");
            assert!(error.message.contains(words), "{body}: {error}");
        }
        for (body, path, words) in cases {
            let error = decode(body.as_bytes()).expect_err(body);
            assert_eq!(error.path, *path, "{body}: {error}");
            assert!(error.message.contains(words), "{body}: {error}");
        }
    }
}
