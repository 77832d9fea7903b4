//! Tests of fleet-scoped budgets on the daemon: which are divided, by what, and how replicas share
//! their counts.

use super::*;
use std::borrow::Cow;
use std::collections::BTreeMap;
use stormguard_core::wire::{EndpointCounts, StatusCounts};

fn fleet(floor: u32) -> BudgetPolicy {
    BudgetPolicy {
        min_retries_per_second: floor,
        scope: BudgetScope::Fleet,
        ..BudgetPolicy::default()
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn only_an_enabled_fleet_scoped_budget_is_divided() {
    assert!(is_fleet_scoped(&fleet(10)));
    assert!(!is_fleet_scoped(&BudgetPolicy::default()));
    let off = BudgetPolicy {
        enabled: false,
        ..fleet(10)
    };
    assert!(!is_fleet_scoped(&off));
}

#[test]
fn first_tries_are_the_attempts_that_are_not_retries() {
    let endpoint = |success, server_error, retries: &[(&'static str, u64)]| EndpointCounts {
        endpoint: Cow::Borrowed("/x"),
        requests: StatusCounts {
            success,
            error: 1,
            server_error,
        },
        retries: retries
            .iter()
            .map(|(a, n)| (Cow::Borrowed(*a), *n))
            .collect::<BTreeMap<_, _>>(),
    };
    let report = Report {
        service: "payments".into(),
        instance: "pod-1".into(),
        caller: None,
        endpoints: vec![endpoint(10, 5, &[("1", 4), ("2", 2)]), endpoint(3, 0, &[])],
        in_flight: None,
        circuit_state: None,
        budget: None,
        gate_on: None,
        span_ms: None,
    };
    assert_eq!(first_tries(&report), (16 - 6) + 4);
}

#[test]
fn processes_reporting_twice_split_the_floor_by_their_requests() {
    let registry = Registry::new();
    let budgets = FleetBudgets::new(false, &registry);
    let t0 = Instant::now();
    for (instance, first) in [("a", 10), ("b", 30)] {
        assert_eq!(
            budgets.report("payments", instance, (first, None), &fleet(8), true, t0),
            None
        );
    }
    let later = t0 + secs(10);
    for (instance, first) in [("a", 100), ("b", 300)] {
        budgets.report("payments", instance, (first, None), &fleet(8), true, later);
    }
    let part = |instance| budgets.part("payments", instance, later).unwrap();
    assert_eq!(part("a").processes, 2);
    assert!((part("a").per_second - 2.0).abs() < 1e-9, "{:?}", part("a"));
    assert!((part("b").per_second - 6.0).abs() < 1e-9, "{:?}", part("b"));
    assert_eq!(budgets.part("orders", "a", later), None, "not divided here");
}

#[test]
fn a_sharing_replica_shares_at_most_once_a_second_and_counts_the_others() {
    let registry = Registry::new();
    let budgets = FleetBudgets::new(true, &registry);
    let t0 = Instant::now();
    let mine = budgets.report("payments", "a", (50, None), &fleet(10), true, t0);
    assert_eq!(
        mine,
        Some(Claims {
            requests_per_second: 50.0,
            processes: 1
        })
    );
    assert!(
        budgets
            .report("payments", "b", (50, None), &fleet(10), true, t0)
            .is_some(),
        "a process joined"
    );
    assert_eq!(
        budgets.report(
            "payments",
            "b",
            (70, None),
            &fleet(10),
            true,
            t0 + Duration::from_millis(500)
        ),
        None,
        "shared this second"
    );
    assert!(budgets
        .report("payments", "b", (25, None), &fleet(10), true, t0 + secs(1))
        .is_some());
    let others = Claims {
        requests_per_second: 300.0,
        processes: 6,
    };
    budgets.heard("payments", Some(others), t0 + secs(1));
    let part = budgets.part("payments", "a", t0 + secs(1)).unwrap();
    assert_eq!(part.processes, 8);
    assert!((part.per_second - 10.0 * 50.0 / 400.0).abs() < 1e-9, "{part:?}");
    budgets.heard("payments", None, t0 + secs(2));
    assert_eq!(
        budgets.part("payments", "a", t0 + secs(2)).unwrap().processes,
        8,
        "a store that stops answering leaves its last word standing"
    );
    budgets.report("payments", "a", (50, None), &fleet(10), true, t0 + secs(29));
    budgets.report("payments", "b", (50, None), &fleet(10), true, t0 + secs(29));
    assert_eq!(
        budgets.part("payments", "a", t0 + secs(31)).unwrap().processes,
        2,
        "for 30 s"
    );
}

#[test]
fn the_families_show_each_budgets_floors_and_forget_a_dependency_nobody_reports_about() {
    let registry = Registry::new();
    let budgets = FleetBudgets::new(false, &registry);
    let t0 = Instant::now();
    budgets.report("payments", "a", (40, None), &fleet(10), true, t0);
    for instance in ["a", "b", "c"] {
        budgets.report("orders", instance, (5, None), &BudgetPolicy::default(), true, t0);
    }
    let text = registry.text(t0);
    for line in [
        "stormguard_budget_min_retries_per_second{scope=\"fleet\",service=\"payments\"} 10",
        "stormguard_budget_retry_ratio{service=\"payments\"} 0.2",
        "stormguard_budget_processes{service=\"payments\"} 1",
        "stormguard_budget_requests_per_second{service=\"payments\"} 40",
        "stormguard_budget_floor_retries_per_second{service=\"payments\"} 10",
        "stormguard_budget_min_retries_per_second{scope=\"process\",service=\"orders\"} 10",
        "stormguard_budget_processes{service=\"orders\"} 3",
        "stormguard_budget_floor_retries_per_second{service=\"orders\"} 30",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    assert_eq!(
        budgets.part("orders", "a", t0),
        None,
        "a process-scoped budget gets no part"
    );
    let text = registry.text(t0 + KEPT_AT_LEAST);
    assert!(!text.contains("payments") && !text.contains("orders"), "{text}");
}

#[test]
fn a_replica_tells_what_it_sees_of_every_budgeted_dependency() {
    let registry = Registry::new();
    let budgets = FleetBudgets::new(false, &registry);
    let t0 = Instant::now();
    for p in 0..200 {
        budgets.report(
            "orders",
            &format!("pod-{p}"),
            (5, None),
            &BudgetPolicy::default(),
            true,
            t0,
        );
    }
    budgets.report("ledger", "pod-0", (5, None), &fleet(10), true, t0);
    let off = BudgetPolicy {
        enabled: false,
        ..BudgetPolicy::default()
    };
    budgets.report("search", "pod-0", (5, None), &off, true, t0);
    let mut seen = budgets.seen(t0);
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let claims = |requests_per_second, processes| Claims {
        requests_per_second,
        processes,
    };
    assert_eq!(
        seen,
        [
            ("ledger".to_string(), claims(5.0, 1)),
            ("orders".to_string(), claims(1000.0, 200))
        ],
        "a dependency without a budget is not followed"
    );
}

#[test]
fn a_process_scoped_budget_is_followed_only_for_a_service_with_a_label_of_its_own() {
    let registry = Registry::new();
    let budgets = FleetBudgets::new(false, &registry);
    let t0 = Instant::now();
    budgets.report("folded", "pod-0", (5, None), &BudgetPolicy::default(), false, t0);
    budgets.report("shared", "pod-0", (5, None), &fleet(10), false, t0);
    let seen: Vec<String> = budgets.seen(t0).into_iter().map(|(service, _)| service).collect();
    assert_eq!(
        seen,
        ["shared"],
        "a fleet-scoped budget is divided whatever its label; a process-scoped one folded into other is not followed"
    );
    assert!(budgets.part("shared", "pod-0", t0).is_some());
}
