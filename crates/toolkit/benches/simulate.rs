//! The herd simulator's speed: events per second for each strategy of the
//! thundering-herd comparison, and the whole comparison. Run with
//! `cargo bench -p stormguard-toolkit --bench simulate`; the throughput column is events/s.

use divan::counter::ItemsCount;
use divan::Bencher;
use stormguard_toolkit::sim::{run, Modifiers, Named, Scenario, Strategy};

fn main() {
    divan::main();
}

fn events(named: Named) -> u64 {
    run(
        &Scenario::default(),
        &Strategy::named(named, Modifiers::default()),
    )
    .events
}

/// One strategy in the thundering herd; the counter is its events.
#[divan::bench(args = Named::SEED, sample_count = 10, sample_size = 1)]
fn strategy(bencher: Bencher, named: Named) {
    let strategy = Strategy::named(named, Modifiers::default());
    let scenario = Scenario::default();
    bencher
        .counter(ItemsCount::new(events(named)))
        .bench(|| run(&scenario, &strategy).events);
}

/// The whole comparison: the four strategies one after another.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn seed_comparison(bencher: Bencher) {
    let scenario = Scenario::default();
    let strategies = Named::SEED.map(|n| Strategy::named(n, Modifiers::default()));
    let total: u64 = Named::SEED.into_iter().map(events).sum();
    bencher
        .counter(ItemsCount::new(total))
        .bench(|| strategies.iter().map(|s| run(&scenario, s).events).sum::<u64>());
}

/// The same with a retry budget and a breaker per client: the library's
/// decisions on every event.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn full_jitter_with_budget_and_breaker(bencher: Bencher) {
    let modifiers = Modifiers {
        budget: true,
        breaker: true,
        ..Modifiers::default()
    };
    let strategy = Strategy::named(Named::FullJitter, modifiers);
    let scenario = Scenario::default();
    let events = run(&scenario, &strategy).events;
    bencher
        .counter(ItemsCount::new(events))
        .bench(|| run(&scenario, &strategy).events);
}
