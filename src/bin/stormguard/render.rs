//! `stormguard render`: a service's resolved policy in a mesh's or
//! gRPC's retry settings.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct RenderArgs {
    /// The dialect.
    #[arg(long, value_enum)]
    format: stormguard_toolkit::render::Format,
    /// The service whose resolved policy to render.
    #[arg(long)]
    service: String,
    /// Its Kubernetes namespace (Istio and Linkerd objects carry it).
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The policy file.
    #[arg(long, env = "STORMGUARD_POLICY", default_value = "policies/retry-policy.yaml")]
    policy: PathBuf,
    /// Print JSON: the rendering and what it lost, as the daemon's /v1/render serves it.
    #[arg(long)]
    json: bool,
}

/// Runs `stormguard render`.
pub fn run(args: RenderArgs) -> ExitCode {
    let policy = match stormguard_toolkit::simulate::resolved_policy(&args.policy, &args.service) {
        Ok(resolved) => resolved.policy,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(1);
        }
    };
    if let Err(problem) = stormguard_core::policy::check_service_name(&args.namespace) {
        eprintln!("--namespace: {problem}");
        return ExitCode::from(1);
    }
    let target = stormguard_toolkit::render::Target {
        service: &args.service,
        namespace: &args.namespace,
    };
    let rendering = stormguard_toolkit::render::render(target, &policy, args.format);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rendering).expect("plain data")
        );
        return ExitCode::SUCCESS;
    }
    print!("{}", stormguard_toolkit::render::text(&rendering));
    for lost in &rendering.lost {
        eprintln!("lost: {}: {}", lost.key, lost.why);
    }
    ExitCode::SUCCESS
}
