//! Tests of tune's recommendations: less waste on every outage, reproducible by seed, and bounds
//! that cannot be kept said.

use std::time::Duration;

use super::*;
use crate::sim::Named;

fn herd_request() -> Request {
    Request {
        service: None,
        current: Named::FullJitter.policy(),
        scenario: Scenario::default(),
        outages: [2, 10, 60].map(Duration::from_secs).to_vec(),
        seeds: 5,
        fresh: (1001, 2),
        max_p99: None,
        max_gave_up: 0.01,
        gate: false,
    }
}

#[test]
fn the_current_policy_and_the_recommendation_are_reported_on_seeds_the_search_never_ran() {
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 2,
        fresh: (101, 3),
        ..herd_request()
    };
    let t = tune(&request, &|_| {}).unwrap();
    let on_fresh_seeds = |policy: &RetryPolicy| {
        let p99s: Vec<f64> = (101..104)
            .map(|seed| {
                let scenario = Scenario {
                    outage: Duration::from_secs(10),
                    seed,
                    ..request.scenario.clone()
                };
                crate::sim::forecast("fresh", policy.clone(), &scenario)
                    .unwrap()
                    .p99_seconds
                    .unwrap()
            })
            .collect();
        p99s.iter().sum::<f64>() / 3.0
    };
    let (fresh, searched) = (&t.fresh.recommended[0], &t.recommended.figures[0]);
    assert_eq!(fresh.p99_seconds, Some(on_fresh_seeds(&t.recommended.policy)));
    assert_eq!(
        t.fresh.current[0].p99_seconds,
        Some(on_fresh_seeds(&t.current.policy))
    );
    assert_ne!(fresh.p99_seconds, searched.p99_seconds, "other seeds, other luck");
    assert!(fresh.p99_spread_seconds.unwrap() > 0.0);
    let text = text(&t, Duration::ZERO);
    assert!(
        text.contains("on 3 fresh seeds (101-103), which the search never ran"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&json(&t)).unwrap();
    assert_eq!(json["fresh"]["seeds"], serde_json::json!([101, 102, 103]));
}

#[test]
fn fresh_seeds_that_share_any_with_the_searchs_or_run_past_the_last_are_refused_naming_them() {
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 5,
        fresh: (3, 20),
        ..herd_request()
    };
    let error = tune(&request, &|_| {}).unwrap_err();
    assert_eq!(
        error.to_string(),
        "--fresh-seed: the fresh seeds 3-22 overlap the searched ones 1-5 (--seed, --seeds): \
         start them past 5"
    );
    let apart = Request {
        fresh: (6, 2),
        seeds: 1,
        ..request.clone()
    };
    assert!(fresh_apart(&apart).is_ok());
    let past_the_last = Request {
        fresh: (u64::MAX, 20),
        ..request
    };
    assert_eq!(
        tune(&past_the_last, &|_| {}).unwrap_err().to_string(),
        "--fresh-seed: 20 seeds from 18446744073709551615 run past the last seed, \
         18446744073709551615; start them lower"
    );
}

#[test]
fn the_recommendation_halves_the_herds_waste_on_every_outage_and_serves_no_later() {
    let t = tune(&herd_request(), &|_| {}).unwrap();
    assert!(t.recommended.score.feasible());
    for (now, rec) in t.current.figures.iter().zip(&t.recommended.figures) {
        assert!(
            rec.wasted <= 0.5 * now.wasted,
            "{}s outage: {} against {}",
            now.outage_seconds,
            rec.wasted,
            now.wasted
        );
        assert!(rec.p99_seconds.unwrap() <= now.p99_seconds.unwrap());
        assert!(rec.gave_up <= 0.01);
    }
    assert!(t.without_gate.is_none(), "the gate was not allowed");
    assert!(!t.recommended.policy.gate.enabled);
}

#[test]
fn the_same_seed_gives_the_same_recommendation() {
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 2,
        ..herd_request()
    };
    let (a, b) = (tune(&request, &|_| {}).unwrap(), tune(&request, &|_| {}).unwrap());
    assert_eq!(a.recommended.knobs, b.recommended.knobs);
    assert_eq!(a.recommended.figures, b.recommended.figures);
    assert_eq!(json(&a), json(&b));
}

#[test]
fn with_the_gate_allowed_it_is_recommended_and_the_best_without_it_is_given_too() {
    // Fifty processes, as tune's default: a process of one caller is sure
    // its dependency is down only after three refusals over a second (as
    // shipped, `overloadWhen: evidence`), and a thousand of them gain
    // nothing from their gates in a 10 s outage.
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 2,
        gate: true,
        scenario: Scenario {
            processes: 50,
            ..Scenario::default()
        },
        ..herd_request()
    };
    let t = tune(&request, &|_| {}).unwrap();
    assert!(t.recommended.policy.gate.enabled);
    let plain = t.without_gate.as_ref().expect("the best without the gate");
    assert!(!plain.policy.gate.enabled);
    assert!(t.recommended.figures[0].wasted < plain.figures[0].wasted);
    let text = text(&t, Duration::ZERO);
    assert!(text.contains("gate: {enabled: true}"), "{text}");
    assert!(
        text.contains("paces callers through the stormguard client") && !text.contains("overloadWhen"),
        "a recommended gate comes with no setting to change first: {text}"
    );
}

#[test]
fn a_bound_nothing_can_keep_is_said_and_the_closest_is_given() {
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 1,
        max_p99: Some(Duration::from_secs(5)),
        ..herd_request()
    };
    let t = tune(&request, &|_| {}).unwrap();
    assert!(!t.recommended.score.feasible());
    let text = text(&t, Duration::ZERO);
    assert!(text.contains("no policy found keeps every bound"), "{text}");
}

#[test]
fn the_changes_name_only_what_differs_in_the_files_words() {
    let from = Named::FullJitter.policy();
    let to = RetryPolicy {
        jitter: stormguard_core::policy::Jitter::Decorrelated,
        initial_delay: Duration::from_secs(3),
        max_elapsed: Some(Duration::from_secs(90)),
        ..from.clone()
    };
    assert_eq!(
        output::changes(&from, &to, false),
        vec![
            ("jitter", "decorrelated".to_owned()),
            ("initialDelay", "3s".to_owned()),
            ("maxElapsed", "1m30s".to_owned()),
        ]
    );
    assert_eq!(output::changes(&from, &from, true).len(), 8, "every searched key");
}

#[test]
fn the_recommendation_keeps_a_margin_on_give_ups_and_is_reported_on_the_fleets_around() {
    let request = Request {
        outages: vec![Duration::from_secs(10)],
        seeds: 2,
        gate: true,
        scenario: Scenario {
            processes: 50,
            replicas: 2,
            latency: Duration::from_millis(1),
            ..Scenario::default()
        },
        ..herd_request()
    };
    let t = tune(&request, &|_| {}).unwrap();
    for f in &t.recommended.figures {
        assert!(f.gave_up <= 0.01 * GAVE_UP_MARGIN, "met with margin: {f:?}");
    }
    let fleets: Vec<&str> = t
        .recommended
        .neighbours
        .iter()
        .map(|n| n.fleet.as_str())
        .collect();
    assert_eq!(
        fleets,
        [
            "half the processes (25)",
            "double the processes (100)",
            "one more replica (3)",
            "5ms latency",
            "against a token bucket of 200/s, burst 200",
            "against 20 workers at 100ms a request, queue 200",
            "against a limit of 200 requests over a sliding second, refused ones counted"
        ]
    );
    // It holds on every fleet and against every dependency model, a
    // request-rate limit that counts what it refuses included.
    let broken: Vec<&str> = t
        .recommended
        .neighbours
        .iter()
        .filter(|n| !n.within_bounds)
        .map(|n| n.fleet.as_str())
        .collect();
    assert_eq!(broken, Vec::<&str>::new());
    assert_eq!(
        t.current.neighbours.len(),
        7,
        "the current policy is judged there too"
    );
    let text = text(&t, Duration::ZERO);
    assert!(
        text.contains("the recommendation on fleets around the stated one")
            && !text.contains("but not against")
            && !text.contains("no candidate near the best holds"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&json(&t)).unwrap();
    assert_eq!(json["recommended"]["neighbours"][3]["fleet"], "5ms latency");
    assert!(json["recommended"]["neighbours"][3]["shape"]
        .as_str()
        .unwrap()
        .ends_with("5ms latency, against a quota of 200 a second"));
}
