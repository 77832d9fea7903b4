//! The fleet's shape from the command line: flags that override, key by
//! key, the herd and the fleet a policy file's `forecast:` block states,
//! shared by `check`, `simulate` and `tune` so that they read the same.

use std::time::Duration;

use clap::Args;
use stormguard_core::policy::{
    DependencyModel, ForecastScenario, MAX_FORECAST_CAPACITY, MAX_FORECAST_WORKERS,
};

use crate::flags::{count_in, duration_in, secs, FlagError};

/// Overrides of a forecast's herd and fleet; each flag left out keeps what
/// the policy file's `forecast:` block says, else the built-in default. The
/// flags reach further than a file may (herds of up to 10,000,000 calls, a
/// process per call, up to 1000 replicas), for what-ifs: a file's bounds
/// keep the daemon's checks quick, and an operator asking for more waits
/// for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct ShapeFlags {
    /// Calls failing at once. Default: the policy file's `forecast:` block, else 1000.
    #[arg(long, value_parser = count_in(1u32, 10_000_000))]
    pub clients: Option<u32>,
    /// Requests the server accepts per calendar second once back. Default:
    /// the policy file's `forecast:` block, else 200.
    #[arg(long, value_parser = count_in(0u32, 1_000_000_000))]
    pub capacity: Option<u32>,
    /// Processes the calls come from, sharing a budget, breaker and send
    /// gate each (0: one per call). Default: the policy file's `forecast:`
    /// block, else 50.
    #[arg(long, value_parser = count_in(0u32, 10_000_000))]
    pub processes: Option<u32>,
    /// Daemon replicas the processes reach; each paces those that reach it.
    /// Default: the policy file's `forecast:` block, else 2.
    #[arg(long, value_parser = count_in(1u32, 1000))]
    pub replicas: Option<u32>,
    /// Whether the replicas share their pace through a store (Redis), as the
    /// daemon does with --pace-store: `--pace-store` or `--pace-store=false`.
    /// Default: the policy file's `forecast:` block, else false.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub pace_store: Option<bool>,
    /// A request's round trip. Default: the policy file's `forecast:` block, else 1ms.
    #[arg(long, value_parser = duration_in(secs(0), secs(3600)))]
    pub latency: Option<Duration>,
    /// How the service refuses what it cannot take once back: `quota` (the
    /// capacity in each calendar second), `token-bucket` (refilled at the
    /// capacity, holding --burst), `concurrency` (--workers serving one
    /// request at a time, as many a second as the capacity, and a --queue
    /// before refusals), or `request-rate` (every request counted over a
    /// sliding second, refused ones too, all refused while the count is past
    /// the capacity). Default: the policy file's `forecast:` block, else quota.
    #[arg(long, value_parser = dependency_model)]
    pub dependency: Option<DependencyModel>,
    /// A token bucket's burst: requests it takes at once. Default: the
    /// file's `forecast:` block, else the capacity.
    #[arg(long, value_parser = count_in(1u32, MAX_FORECAST_CAPACITY))]
    pub burst: Option<u32>,
    /// A concurrency limit's workers. Default: the file's `forecast:`
    /// block, else 20.
    #[arg(long, value_parser = count_in(1u32, MAX_FORECAST_WORKERS))]
    pub workers: Option<u32>,
    /// A concurrency limit's queue: requests that wait for a worker before
    /// the rest are refused. Default: the file's `forecast:` block, else the capacity.
    #[arg(long, value_parser = count_in(0u32, MAX_FORECAST_CAPACITY))]
    pub queue: Option<u32>,
}

fn dependency_model(text: &str) -> Result<DependencyModel, FlagError> {
    DependencyModel::from_name(text).ok_or(FlagError::OneOf(DependencyModel::NAMES))
}

impl ShapeFlags {
    /// `herd` with every flag given in place of what it set.
    pub fn apply(&self, mut herd: ForecastScenario) -> ForecastScenario {
        let fleet = &mut herd.fleet;
        herd.clients = self.clients.unwrap_or(herd.clients);
        herd.capacity = self.capacity.unwrap_or(herd.capacity);
        fleet.processes = self.processes.unwrap_or(fleet.processes);
        fleet.replicas = self.replicas.unwrap_or(fleet.replicas);
        fleet.pace_store = self.pace_store.unwrap_or(fleet.pace_store);
        fleet.latency = self.latency.unwrap_or(fleet.latency);
        let dependency = &mut herd.dependency;
        dependency.model = self.dependency.unwrap_or(dependency.model);
        dependency.burst = self.burst.or(dependency.burst);
        dependency.workers = self.workers.or(dependency.workers);
        dependency.queue = self.queue.or(dependency.queue);
        herd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        shape: ShapeFlags,
    }

    fn parsed(args: &[&str]) -> Result<ShapeFlags, String> {
        let args = std::iter::once("stormguard").chain(args.iter().copied());
        Cli::try_parse_from(args)
            .map(|cli| cli.shape)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_given_replace_the_files_keys_and_the_rest_stay() {
        let mut file = ForecastScenario::default();
        file.fleet.pace_store = true;
        file.clients = 5000;
        let flags = parsed(&["--processes", "0", "--latency", "5ms", "--pace-store=false"]).unwrap();
        let herd = flags.apply(file.clone());
        assert_eq!(
            (herd.clients, herd.capacity),
            (5000, 200),
            "not given: the file's"
        );
        assert_eq!(herd.fleet.processes, 0);
        assert_eq!(herd.fleet.latency, Duration::from_millis(5));
        assert!(!herd.fleet.pace_store);
        assert_eq!(herd.fleet.replicas, file.fleet.replicas);
        assert_eq!(parsed(&[]).unwrap().apply(file.clone()), file);
        assert_eq!(parsed(&["--pace-store"]).unwrap().pace_store, Some(true));
    }

    #[test]
    fn a_flag_out_of_range_is_refused_with_its_name_and_range() {
        let error = parsed(&["--replicas", "0"]).unwrap_err();
        assert!(
            error.contains("--replicas") && error.contains("between 1 and 1000"),
            "{error}"
        );
        let error = parsed(&["--latency", "2h"]).unwrap_err();
        assert!(
            error.contains("--latency") && error.contains("between 0s and 1h0m0s"),
            "{error}"
        );
    }
}
