//! Tests of the report table's exposition: families moved by reports, help and types, labels
//! escaped, states expired.

use super::*;

use crate::reports::decode;

/// The families `m` writes at a scrape at `now`.
fn scrape(m: &ClientMetrics, now: Instant) -> String {
    let mut out = Vec::new();
    m.write(now, &mut out);
    String::from_utf8(out).unwrap()
}

/// The value of the series `name{labels}` (labels as exposed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A decoded report; its text is leaked, as a decoded report borrows from it.
fn report(json: &str) -> Report<'static> {
    decode(Box::leak(json.to_string().into_boxed_str()).as_bytes()).unwrap()
}

/// Caps that none of these reports reach, unless a test lowers one.
const LIMITS: ReportLimits = ReportLimits {
    max_unlisted_services: 100,
    max_endpoints_per_service: 100,
    max_attempt_label: 10,
    max_instances: 10_000,
    instance_ttl: Duration::from_secs(60),
    batch_window: Duration::from_secs(600),
    label_ttl: Duration::from_secs(3600),
};

const CHARGE: &str = r#"{"service": "payment-service", "instance": "pod-a",
    "endpoints": [{"endpoint": "/charge", "requests": {"success": 120, "error": 3, "server_error": 7},
                   "retries": {"1": 9, "2": 1}}],
    "inFlight": 4, "circuitState": "open", "budget": {"retriesDenied": 2, "remainingRatio": 0.4}}"#;

#[test]
fn a_report_moves_each_family_by_its_values_and_a_second_adds() {
    let m = ClientMetrics::new(LIMITS, &Registry::new());
    let t0 = Instant::now();
    assert!(m.ingest(&report(CHARGE), |_| true, t0).is_empty());
    let text = scrape(&m, t0);
    let series = |s: &str| value(&text, s);
    let req = r#"http_client_requests_total{endpoint="/charge",service="payment-service",status="#;
    assert_eq!(series(&format!(r#"{req}"success"}}"#)), Some(120.0));
    assert_eq!(series(&format!(r#"{req}"server_error"}}"#)), Some(7.0));
    assert_eq!(
        series(
            r#"http_client_retry_attempts_total{attempt="1",endpoint="/charge",service="payment-service"}"#
        ),
        Some(9.0)
    );
    assert_eq!(
        series(r#"http_server_requests_total{service="payment-service"}"#),
        Some(127.0)
    );
    assert_eq!(
        series(r#"circuit_breaker_state{service="payment-service"}"#),
        Some(2.0)
    );
    assert_eq!(
        series(r#"http_client_concurrent_requests{service="payment-service"}"#),
        Some(4.0)
    );
    assert_eq!(
        series(r#"stormguard_budget_retries_denied_total{service="payment-service"}"#),
        Some(2.0)
    );
    assert_eq!(
        series(r#"stormguard_budget_remaining_ratio{service="payment-service"}"#),
        Some(0.4)
    );

    m.ingest(&report(CHARGE), |_| true, t0);
    let text = scrape(&m, t0);
    assert_eq!(
        value(&text, &format!(r#"{req}"success"}}"#)),
        Some(240.0),
        "counters are sums of deltas"
    );
    assert_eq!(
        value(&text, r#"stormguard_reports_total{result="accepted"}"#),
        Some(2.0)
    );
}

#[test]
fn every_family_has_help_and_type_and_labels_are_escaped() {
    let m = ClientMetrics::new(LIMITS, &Registry::new());
    let odd = r#"{"service": "a", "instance": "i", "endpoints": [{"endpoint": "/q\"x\\y\nz", "requests": {"success": 1}}]}"#;
    m.ingest(&report(odd), |_| true, Instant::now());
    let text = scrape(&m, Instant::now());
    assert!(
        text.contains(r#"http_client_requests_total{endpoint="/q\"x\\y\nz",service="a",status="success"} 1"#),
        "{text}"
    );
    for family in [
        "http_client_requests_total",
        "circuit_breaker_state",
        "stormguard_reports_total",
    ] {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
        assert!(text.contains(&format!("# HELP {family} ")), "{family}");
    }
}

#[test]
fn states_take_the_worst_live_instance_and_expire_after_the_ttl() {
    let limits = ReportLimits {
        instance_ttl: Duration::from_secs(10),
        ..LIMITS
    };
    let m = ClientMetrics::new(limits, &Registry::new());
    let t0 = Instant::now();
    let at = |instance: &str, state: &str, in_flight: u64| {
        report(&format!(
            r#"{{"service": "a", "instance": "{instance}", "circuitState": "{state}", "inFlight": {in_flight}}}"#
        ))
    };
    m.ingest(&at("one", "closed", 3), |_| true, t0);
    m.ingest(&at("two", "half-open", 5), |_| true, t0 + Duration::from_secs(5));
    let text = scrape(&m, t0 + Duration::from_secs(6));
    assert_eq!(value(&text, r#"circuit_breaker_state{service="a"}"#), Some(1.0));
    assert_eq!(
        value(&text, r#"http_client_concurrent_requests{service="a"}"#),
        Some(8.0)
    );
    let text = scrape(&m, t0 + Duration::from_secs(12));
    assert_eq!(
        value(&text, r#"http_client_concurrent_requests{service="a"}"#),
        Some(5.0),
        "one expired"
    );
    let text = scrape(&m, t0 + Duration::from_secs(20));
    assert_eq!(
        value(&text, r#"circuit_breaker_state{service="a"}"#),
        None,
        "all expired: no series"
    );
}

#[test]
fn gates_on_count_the_live_instances_pacing_and_a_policy_without_a_gate_adds_nothing() {
    let limits = ReportLimits {
        instance_ttl: Duration::from_secs(10),
        ..LIMITS
    };
    let m = ClientMetrics::new(limits, &Registry::new());
    let t0 = Instant::now();
    let at = |instance: &str, gate: &str| {
        report(&format!(r#"{{"service": "a", "instance": "{instance}"{gate}}}"#))
    };
    let gates_on = r#"stormguard_send_gates_on{service="a"}"#;
    m.ingest(&at("no-gate", ""), |_| true, t0);
    assert_eq!(value(&scrape(&m, t0), gates_on), None, "no instance has a gate");
    m.ingest(&at("one", r#", "gateOn": true"#), |_| true, t0);
    m.ingest(&at("two", r#", "gateOn": false"#), |_| true, t0);
    m.ingest(
        &at("three", r#", "gateOn": true"#),
        |_| true,
        t0 + Duration::from_secs(5),
    );
    assert_eq!(
        value(&scrape(&m, t0 + Duration::from_secs(6)), gates_on),
        Some(2.0)
    );
    m.ingest(
        &at("one", r#", "gateOn": false"#),
        |_| true,
        t0 + Duration::from_secs(6),
    );
    assert_eq!(
        value(&scrape(&m, t0 + Duration::from_secs(7)), gates_on),
        Some(1.0),
        "the latest report of an instance wins"
    );
    assert_eq!(
        value(&scrape(&m, t0 + Duration::from_millis(15_500)), gates_on),
        Some(0.0),
        "three expired; one still reports a gate, off"
    );
}

#[test]
fn breakers_open_count_the_live_instances_whose_breaker_is_not_closed() {
    let m = ClientMetrics::new(LIMITS, &Registry::new());
    let t0 = Instant::now();
    let at = |instance: &str, breaker: &str| {
        report(&format!(
            r#"{{"service": "a", "instance": "{instance}"{breaker}}}"#
        ))
    };
    let open = r#"stormguard_circuit_breakers_open{service="a"}"#;
    m.ingest(&at("no-breaker", ""), |_| true, t0);
    assert_eq!(value(&scrape(&m, t0), open), None, "no instance has a breaker");
    m.ingest(&at("one", r#", "circuitState": "open""#), |_| true, t0);
    m.ingest(&at("two", r#", "circuitState": "half-open""#), |_| true, t0);
    m.ingest(&at("three", r#", "circuitState": "closed""#), |_| true, t0);
    assert_eq!(
        value(&scrape(&m, t0 + Duration::from_secs(1)), open),
        Some(2.0),
        "open and half-open both wait to probe; closed does not count"
    );
    // Which reports are live, and which of an instance's counts, is the
    // instance table's (see the send gates' test above).
}

#[test]
fn the_guard_folds_unlisted_services_endpoints_and_attempts_into_other() {
    let limits = ReportLimits {
        max_unlisted_services: 1,
        max_endpoints_per_service: 2,
        max_attempt_label: 3,
        max_instances: 2,
        ..LIMITS
    };
    let m = ClientMetrics::new(limits, &Registry::new());
    let now = Instant::now();
    let listed = |s: &str| s == "listed";
    let with = |service: &str, instance: &str, endpoint: &str| {
        report(&format!(
            r#"{{"service": "{service}", "instance": "{instance}",
                "endpoints": [{{"endpoint": "{endpoint}", "requests": {{"success": 1}}, "retries": {{"2": 1, "7": 1}}}}]}}"#
        ))
    };
    let first = m.ingest(&with("listed", "i1", "/a"), listed, now);
    assert_eq!(
        (first.endpoints, first.attempts),
        (0, 1),
        "attempt 7 is over the cap of 3"
    );
    assert_eq!(m.ingest(&with("listed", "i1", "/b"), listed, now).endpoints, 0);
    assert_eq!(
        m.ingest(&with("listed", "i1", "/c"), listed, now).endpoints,
        1,
        "a third endpoint"
    );
    assert!(
        !m.ingest(&with("new-one", "i2", "/a"), listed, now).service,
        "one unlisted service fits"
    );
    let over = m.ingest(&with("new-two", "i3", "/a"), listed, now);
    assert!(over.service && over.instance_dropped, "{over:?}");
    assert!(
        !m.ingest(&with("listed", "i1", "/a"), listed, now)
            .instance_dropped,
        "a known instance stays"
    );

    let text = scrape(&m, now);
    assert!(
        text.contains(r#"http_client_requests_total{endpoint="other",service="listed",status="success"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"http_client_requests_total{endpoint="/a",service="other",status="success"} 1"#));
    assert!(text
        .contains(r#"http_client_retry_attempts_total{attempt="other",endpoint="/a",service="listed"} 2"#));
    assert!(!text.contains("new-two"));
    assert_eq!(
        value(&text, r#"stormguard_report_labels_folded_total{label="service"}"#),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"stormguard_report_labels_folded_total{label="endpoint"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"stormguard_report_labels_folded_total{label="instance"}"#
        ),
        Some(1.0)
    );
}

#[test]
fn a_flood_of_names_keeps_the_series_bounded() {
    let m = ClientMetrics::new(LIMITS, &Registry::new());
    let now = Instant::now();
    for i in 0..12_000 {
        let r = report(&format!(
            r#"{{"service": "svc-{}", "instance": "pod-{i}", "endpoints": [{{"endpoint": "/e{i}", "requests": {{"error": 1}}}}]}}"#,
            i % 300
        ));
        m.ingest(&r, |_| false, now);
    }
    let text = scrape(&m, now);
    let series = text
        .lines()
        .filter(|l| l.starts_with("http_client_requests_total{"))
        .count();
    // 100 unlisted services with up to 100 endpoints each, plus `other` with its own.
    assert!(series <= 101 * 101, "{series} series");
    let table = m.lock();
    assert!(table.instances <= 10_000);
    assert_eq!(
        table.instances,
        table.services.iter().map(|s| s.instances.len()).sum::<usize>()
    );
    assert!(
        table.services.iter().all(|s| s.endpoints.len() <= 101),
        "100 and other"
    );
    assert_eq!(table.services.len(), 101);
}

#[test]
fn unlisted_services_that_stop_reporting_expire_and_free_their_place() {
    let limits = ReportLimits {
        max_unlisted_services: 2,
        label_ttl: Duration::from_secs(60),
        ..LIMITS
    };
    let m = ClientMetrics::new(limits, &Registry::new());
    let t0 = Instant::now();
    let listed = |s: &str| s == "listed";
    let calls = |service: &str| {
        report(&format!(
            r#"{{"service": "{service}", "instance": "pod", "endpoints": [{{"endpoint": "/x", "requests": {{"success": 1}}}}]}}"#
        ))
    };
    let requests = |service: &str| {
        format!(r#"http_client_requests_total{{endpoint="/x",service="{service}",status="success"}}"#)
    };
    for service in ["one-off-a", "one-off-b", "listed"] {
        assert!(!m.ingest(&calls(service), listed, t0).service);
    }
    assert!(
        m.ingest(&calls("late"), listed, t0).service,
        "over the cap: other"
    );
    m.ingest(&calls("one-off-b"), listed, t0 + Duration::from_secs(30));

    let later = t0 + Duration::from_secs(61);
    assert!(
        !m.ingest(&calls("newcomer"), listed, later).service,
        "one-off-a expired and freed its place"
    );
    let text = scrape(&m, later);
    assert_eq!(value(&text, &requests("one-off-a")), None, "its series are gone");
    assert_eq!(value(&text, &requests("one-off-b")), Some(2.0), "still reporting");
    assert_eq!(value(&text, &requests("newcomer")), Some(1.0));
    assert_eq!(
        value(&text, &requests("listed")),
        Some(1.0),
        "listed services never expire"
    );
    let text = scrape(&m, t0 + Duration::from_secs(3600));
    assert_eq!(value(&text, &requests("listed")), Some(1.0));
    assert_eq!(value(&text, &requests("newcomer")), None);
}
