//! `stormguard tune`: a search of the simulator for a policy that wastes
//! less than a service's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use stormguard_toolkit::flags::{count_in, duration_in, secs};
use stormguard_toolkit::shape::ShapeFlags;
use stormguard_toolkit::sim::{Named, Scenario};

#[derive(Args)]
pub struct TuneArgs {
    /// A policy file whose --service policy to improve on. Without one: the
    /// simulator's full-jitter herd (100ms × 2^attempt, capped at 10s,
    /// retried until served).
    #[arg(long, requires = "service")]
    policy: Option<PathBuf>,
    /// The service (in --policy) whose resolved policy to improve on.
    #[arg(long, requires = "policy")]
    service: Option<String>,
    /// The outages to do well on, comma-separated: the server rejects
    /// everything from t = 0 until then, then takes --capacity a second.
    /// Default: the policy file's `forecast:` block for the service, else 2s,10s,60s.
    #[arg(long, value_delimiter = ',', value_parser = duration_in(secs(0), secs(86_400)))]
    outages: Vec<Duration>,
    #[command(flatten)]
    shape: ShapeFlags,
    /// Clients first fail at random times in [0, spread) instead of all at t = 0.
    #[arg(long, default_value = "0s", value_parser = duration_in(secs(0), secs(86_400)))]
    spread: Duration,
    /// The most p99 time to success allowed on every outage. Default: no
    /// later than the current policy's on each.
    #[arg(long, value_parser = duration_in(Duration::from_millis(1), secs(86_400)))]
    max_p99: Option<Duration>,
    /// The largest share of clients that may give up (or still be retrying
    /// after an hour), on every outage.
    #[arg(long, default_value_t = 0.01, value_parser = stormguard_toolkit::flags::share)]
    max_gave_up: f64,
    /// Never recommend the send gate (it needs the stormguard client library).
    #[arg(long)]
    without_gate: bool,
    /// The first seed; each policy runs on --seeds seeds from it, the same for every policy.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seeds each policy runs on, per outage.
    #[arg(long, default_value_t = 5, value_parser = count_in(1u32, 100))]
    seeds: u32,
    /// The first of the seeds the current policy and the recommendation are
    /// reported on afterwards: none of the search's, so that the figures
    /// are what to expect and not the luck of the seeds the search chose by.
    #[arg(long, default_value_t = 1001)]
    fresh_seed: u64,
    /// How many fresh seeds, per outage.
    #[arg(long, default_value_t = 20, value_parser = count_in(2u32, 1000))]
    fresh_seeds: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Draw the requests per second on the first seed, current against recommended,
    /// on every outage, to this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// Runs `stormguard tune`.
pub fn run(args: TuneArgs) -> ExitCode {
    let mut stated = None;
    let current = match args.policy.as_deref().zip(args.service.as_deref()) {
        Some((path, service)) => match stormguard_toolkit::simulate::resolved_policy(path, service) {
            Ok(resolved) => {
                stated = Some((resolved.herd, resolved.outages));
                Some((path.display().to_string(), service.to_owned(), resolved.policy))
            }
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    let (herd, stated_outages) = stated.unwrap_or_default();
    let outages = match (stated_outages, args.outages.is_empty()) {
        (_, false) => args.outages,
        (Some(outages), true) => outages,
        (None, true) => [2, 10, 60].map(secs).to_vec(),
    };
    let herd = args.shape.apply(herd);
    let request = stormguard_toolkit::tune::Request {
        service: current
            .as_ref()
            .map(|(path, service, _)| (path.clone(), service.clone())),
        current: current.map_or_else(|| Named::FullJitter.policy(), |(_, _, policy)| policy),
        scenario: Scenario {
            spread: args.spread,
            seed: args.seed,
            ..Scenario::forecast(&herd, outages[0])
        },
        outages,
        seeds: args.seeds,
        fresh: (args.fresh_seed, args.fresh_seeds),
        max_p99: args.max_p99,
        max_gave_up: args.max_gave_up,
        gate: !args.without_gate,
    };
    let started = std::time::Instant::now();
    let shown = args
        .json
        .then(indicatif::ProgressBar::hidden)
        .unwrap_or_else(progress_bar);
    let progress = |p: stormguard_toolkit::tune::Progress| {
        shown.set_message(format!(
            "searched {} policies (a grid of {}): {}",
            p.searched, p.grid, p.stage
        ));
    };
    let tuned = stormguard_toolkit::tune::tune(&request, &progress);
    shown.finish_and_clear();
    let tuning = match tuned {
        Ok(tuning) => tuning,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = &args.svg {
        if let Err(e) = std::fs::write(path, stormguard_toolkit::tune::svg(&tuning)) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if args.json {
        print!("{}", stormguard_toolkit::tune::json(&tuning));
    } else {
        print!("{}", stormguard_toolkit::tune::text(&tuning, started.elapsed()));
    }
    ExitCode::SUCCESS
}

/// A spinner with the time elapsed and a message, on standard error, when
/// both standard output and standard error are a terminal; hidden when the
/// output goes to a file or a pipe.
fn progress_bar() -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("a valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
