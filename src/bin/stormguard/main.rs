//! The `stormguard` command line.
#![forbid(unsafe_code)]

mod check;
mod diff;
mod policy_limits;
mod render;
mod serve;
mod served;
mod simulate;
mod tune;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// stormguard: stops retry storms. Serves validated, hot-reloaded retry
/// policies to the services of a fleet.
#[derive(Parser)]
#[command(name = "stormguard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the policy file over HTTP, reloading it when it changes.
    Serve(Box<serve::ServeArgs>),
    /// Validate and lint a policy file: each service's resolved policy, storm-risk
    /// warnings and a forecast of a thundering herd under it (exit 0 valid, 1 invalid).
    Check(check::CheckArgs),
    /// Simulate a thundering herd against a recovering server, in virtual time:
    /// what a retry strategy or a service's policy does to it (by default 1000 clients
    /// failing at once, 200 requests/s, a 10 s outage).
    Simulate(Box<simulate::SimulateArgs>),
    /// Search retry policies in the simulator for one that wastes fewer
    /// requests over a family of outages than a service's policy (or the
    /// simulator's full-jitter herd), serving its callers no later; print
    /// both side by side and the settings to paste into the policy file.
    Tune(tune::TuneArgs),
    /// Print a service's resolved policy in gRPC's, Envoy's, Istio's or
    /// Linkerd's retry settings, and what that dialect cannot express.
    Render(render::RenderArgs),
    /// Show what changing a policy file does before it ships: per service,
    /// each resolved key that changes and where its new value comes from,
    /// services added and removed, lint warnings new and cleared, and the
    /// forecast before and after; either side may be a running daemon's URL
    /// (exit 0; 1 if a side is invalid or cannot be read; 2 if a forecast
    /// worsens past --threshold or a warning appears).
    Diff(diff::DiffArgs),
}

/// The daemon allocates and frees small buffers on every request; mimalloc
/// does that markedly faster than glibc's malloc (see bench/serve.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => check::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Simulate(args) => simulate::run(*args),
        Command::Tune(args) => tune::run(args),
        Command::Render(args) => render::run(args),
        Command::Diff(args) => diff::run(args),
    }
}
