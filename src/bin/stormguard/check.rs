//! `stormguard check`: validate and lint a policy file.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::policy_limits::PolicyLimits;
use clap::Args;
use stormguard_toolkit::check::Verdict;
use stormguard_toolkit::shape::ShapeFlags;

#[derive(Args)]
pub struct CheckArgs {
    /// The policy file to check.
    #[arg(env = "STORMGUARD_POLICY", default_value = "policies/retry-policy.yaml")]
    path: PathBuf,
    /// Exit 1 on storm-risk warnings too, not only on errors (for CI on a ConfigMap repository).
    #[arg(long)]
    deny_warnings: bool,
    #[command(flatten)]
    policy_limits: PolicyLimits,
    #[command(flatten)]
    shape: ShapeFlags,
}

/// Checks the file `args` names, printing the report.
pub fn run(args: CheckArgs) -> ExitCode {
    let (report, verdict) =
        stormguard_toolkit::check::check(&args.path, args.policy_limits.load_limits(), &args.shape);
    match verdict {
        Verdict::Clean => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Verdict::Warnings => {
            print!("{report}");
            ExitCode::from(u8::from(args.deny_warnings))
        }
        Verdict::Invalid => {
            eprint!("{report}");
            ExitCode::from(1)
        }
    }
}
