//! `stormguard diff`: what changing a policy file does, either side a
//! file or a running daemon's URL.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::policy_limits::PolicyLimits;
use crate::served::daemon_policies;
use clap::Args;
use stormguard_core::policy::PolicyDocument;

#[derive(Args)]
pub struct DiffArgs {
    /// The policy as it is: a file, or a running daemon's URL
    /// (`http://localhost:8080`), whose `GET /v1/policies` is read.
    old: String,
    /// The policy as it would be: a file, or a running daemon's URL.
    new: String,
    /// PEM CA certificates an `https://` daemon's certificate must chain
    /// to, in place of the public web CAs.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// How much worse a forecast may get (waste, or p99 while serving no
    /// more calls) before the change counts as worsening it: 0.1 is 10 %.
    #[arg(long, default_value_t = 0.1, value_parser = stormguard_toolkit::flags::share)]
    threshold: f64,
    /// Print JSON: `services` (each with `entry`, `keys`, `forecasts`),
    /// `warnings_added`, `warnings_cleared`, `threshold`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    policy_limits: PolicyLimits,
}

/// Runs `stormguard diff`.
pub fn run(args: DiffArgs) -> ExitCode {
    let Ok((old, new)) = diff_sides(&args) else {
        return ExitCode::from(1);
    };
    let diff = stormguard_toolkit::diff::diff(&old, &new, args.threshold);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff).expect("plain data"));
    } else {
        print!("{}", stormguard_toolkit::diff::as_text(&diff));
    }
    ExitCode::from(if diff.worsens() { 2 } else { 0 })
}

/// The two sides of a diff: files first, so that a daemon's side takes a
/// file's forecast, call graph and reporters. Each problem is printed.
fn diff_sides(args: &DiffArgs) -> Result<(PolicyDocument, PolicyDocument), ()> {
    let limits = args.policy_limits.load_limits();
    let is_daemon = |side: &str| side.starts_with("http://") || side.starts_with("https://");
    let mut sides = [&args.old, &args.new].map(|side| {
        (!is_daemon(side)).then(|| {
            stormguard_toolkit::policy::load_file(side.as_ref(), limits)
                .map(|(document, _)| document)
                .map_err(|errors| eprint!("{}", stormguard_toolkit::check::invalid_report(&errors)))
        })
    });
    let compared = sides
        .iter()
        .flatten()
        .find_map(|side| side.as_ref().ok())
        .cloned();
    for (slot, side) in sides.iter_mut().zip([&args.old, &args.new]) {
        if slot.is_none() {
            *slot = Some(
                daemon_policies(side, args.ca_file.as_deref(), compared.as_ref())
                    .map_err(|problem| eprintln!("{side}: {problem}")),
            );
        }
    }
    let [Some(old), Some(new)] = sides else {
        unreachable!("every side is a file or a daemon")
    };
    Ok((old?, new?))
}
