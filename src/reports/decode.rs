//! A client's report body, decoded strictly: unknown fields, negative or
//! fractional counts, unknown statuses and circuit states are errors that
//! name the field. A body holds one report, an array of them, or a
//! [`ReportBatch`] (an array with the sender's batch number). In an array or
//! a batch each report stands alone: a bad one is refused with its reason
//! and the others count.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use stormguard_core::wire::{check_instance, FieldError, Rejected, Report, ReportBatch, MAX_BATCH};

/// Why a body was refused whole.
pub type ReportError = FieldError;

/// What a body held that can be counted.
#[derive(Debug, Default)]
pub struct Decoded<'a> {
    /// The sender and its batch number, when the body was a batch.
    pub batch: Option<(Cow<'a, str>, u64)>,
    /// The reports to count.
    pub reports: Vec<Report<'a>>,
    /// The reports refused, with their reasons.
    pub rejected: Vec<Rejected>,
}

/// Decodes and checks one report.
pub fn decode(body: &[u8]) -> Result<Report<'_>, ReportError> {
    // The plain decoder is the fast path; a failure is decoded again with
    // path tracking, only to say where it is.
    let report = match serde_json::from_slice::<Report>(body) {
        Ok(report) => report,
        Err(_) => return Err(locate::<Report>(body)),
    };
    report.check()?;
    Ok(report)
}

/// Decodes a body: one report (refused whole if bad), or an array or a
/// batch of them (each refused alone; the body is refused whole only when it
/// cannot be read, holds too many reports, or every report in it is bad).
pub fn decode_body(body: &[u8]) -> Result<Decoded<'_>, ReportError> {
    let (batch, items) = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => match serde_json::from_slice::<Vec<&RawValue>>(body) {
            Ok(items) => (None, items),
            Err(_) => return Err(locate::<Vec<&RawValue>>(body)),
        },
        _ => match serde_json::from_slice::<ReportBatch<&RawValue>>(body) {
            Ok(batch) => (Some((batch.instance, batch.sequence)), batch.reports),
            Err(_) if !is_batch(body) => {
                return decode(body).map(|report| Decoded {
                    reports: vec![report],
                    ..Decoded::default()
                })
            }
            Err(_) => return Err(locate::<ReportBatch<&RawValue>>(body)),
        },
    };
    if let Some((instance, _)) = &batch {
        check_instance(instance).map_err(|e| FieldError::at("instance", e))?;
    }
    if items.len() > MAX_BATCH {
        return Err(FieldError::at(
            ".",
            format!("{} reports in one request; at most {MAX_BATCH}", items.len()),
        ));
    }
    let prefix = if batch.is_some() { "reports" } else { "" };
    let mut decoded = Decoded {
        batch,
        ..Decoded::default()
    };
    for (index, item) in items.into_iter().enumerate() {
        let at = format!("{prefix}[{index}]");
        match decode(item.get().as_bytes()).and_then(|r| same_sender(r, decoded.batch.as_ref())) {
            Ok(report) => decoded.reports.push(report),
            Err(error) => {
                let error = error.within(&at);
                decoded.rejected.push(Rejected {
                    index,
                    path: error.path,
                    error: error.message,
                });
            }
        }
    }
    if decoded.reports.is_empty() {
        if let Some(first) = decoded.rejected.first() {
            return Err(FieldError::at(first.path.clone(), first.error.clone()));
        }
    }
    Ok(decoded)
}

/// A batch's reports speak for the batch's sender only.
fn same_sender<'a>(
    report: Report<'a>,
    batch: Option<&(Cow<'_, str>, u64)>,
) -> Result<Report<'a>, ReportError> {
    match batch {
        Some((instance, _)) if report.instance != *instance => Err(FieldError::at(
            "instance",
            format!("{:?} is not the batch's instance {instance:?}", report.instance),
        )),
        _ => Ok(report),
    }
}

/// Whether a body that is not a valid batch was meant as one: an object
/// with a `reports` key. Only read on the error path.
fn is_batch(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Shape {
        reports: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Shape>(body).is_ok_and(|shape| shape.reports.is_some())
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
        FieldError::at(path, e.into_inner().to_string())
    });
    match report {
        Err(error) => error,
        Ok(_) => match json.end() {
            Err(e) => FieldError::at(".", e.to_string()),
            Ok(()) => FieldError::at(".", "the report does not decode"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::breaker::CircuitState;

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
    fn in_an_array_a_bad_report_is_refused_alone() {
        let two = format!("[{GOOD}, {{\"service\": \"b\", \"instance\": \"i\"}}]");
        let decoded = decode_body(two.as_bytes()).unwrap();
        assert_eq!(decoded.reports.len(), 2);
        assert_eq!(decoded.reports[1].service, "b");
        assert!(decoded.batch.is_none() && decoded.rejected.is_empty());

        let bad = format!("[{GOOD}, {{\"service\": \"b\", \"instance\": \"i\", \"inFlight\": -1}}, {{\"service\": \"B\", \"instance\": \"i\"}}]");
        let decoded = decode_body(bad.as_bytes()).unwrap();
        assert_eq!(decoded.reports.len(), 1, "the good report counts");
        let refused: Vec<_> = decoded
            .rejected
            .iter()
            .map(|r| (r.index, r.path.as_str()))
            .collect();
        assert_eq!(refused, [(1, "[1].inFlight"), (2, "[2].service")]);
        assert!(decoded.rejected[1].error.contains("DNS-1123"));

        let all_bad = r#"[{"service": "B", "instance": "i"}]"#;
        assert_eq!(decode_body(all_bad.as_bytes()).unwrap_err().path, "[0].service");
        let many = format!("[{}]", vec![GOOD; MAX_BATCH + 1].join(","));
        assert!(decode_body(many.as_bytes())
            .unwrap_err()
            .message
            .contains("at most 1000"));
        assert_eq!(decode_body(b"[]").unwrap().reports.len(), 0);
    }

    #[test]
    fn a_batch_carries_its_sender_and_number_and_speaks_for_its_sender_only() {
        let body = format!(
            r#"{{"instance": "checkout-7f9c4-abcde", "sequence": 41, "reports": [{GOOD}, {{"service": "b", "instance": "someone-else"}}]}}"#
        );
        let decoded = decode_body(body.as_bytes()).unwrap();
        assert_eq!(decoded.batch, Some(("checkout-7f9c4-abcde".into(), 41)));
        assert_eq!(decoded.reports.len(), 1);
        assert_eq!(decoded.rejected[0].path, "reports[1].instance");
        let negative = r#"{"instance": "i", "sequence": -1, "reports": []}"#;
        assert_eq!(decode_body(negative.as_bytes()).unwrap_err().path, "sequence");
        let long = format!(
            r#"{{"instance": "{}", "sequence": 1, "reports": []}}"#,
            "x".repeat(254)
        );
        assert_eq!(
            decode_body(long.as_bytes()).unwrap_err().path,
            "instance",
            "the batch's own instance is held to the pod name's length, even with no reports"
        );
        let unknown = r#"{"instance": "i", "sequence": 1, "reports": [], "x": 1}"#;
        assert!(decode_body(unknown.as_bytes())
            .unwrap_err()
            .message
            .contains("unknown field `x`"));
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
                "must not be negative, found -1",
            ),
            (
                r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/x", "requests": {"success": 1.5}}]}"#,
                "endpoints[0].requests.success",
                "expected a whole number, 0 or more, found 1.5",
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
                "must not be negative, found -4",
            ),
            (
                r#"{"service": "a", "instance": "i", "budget": {"remainingRatio": 1.5}}"#,
                "budget.remainingRatio",
                "not a share in [0, 1]",
            ),
            (
                r#"{"service": "a", "instance": "i", "gateOn": "yes"}"#,
                "gateOn",
                "invalid type: string",
            ),
            (
                r#"{"service": "a", "instance": "i"} {"service": "b"}"#,
                ".",
                "trailing characters",
            ),
        ];
        for (body, path, words) in cases.iter().filter(|(body, _, _)| !body.starts_with('[')) {
            let error = decode_body(body.as_bytes()).expect_err(body);
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
