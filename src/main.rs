//! The `stormguard` command line.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use stormguard::identity::{Mode, TokenRules};
use stormguard::reports::ReportLimits;
use stormguard::serve::{AdminSecret, ServeConfig};
use stormguard::server::Limits;
use stormguard::tls::TlsFiles;
use stormguard::watch::WatchConfig;
use stormguard_core::policy::{DependencyModel, ForecastScenario, PolicyDocument};
use stormguard_toolkit::check::Verdict;
use stormguard_toolkit::flags::{count_in, duration_in, millis, secs};
use stormguard_toolkit::policy::{LoadLimits, DEFAULT_MAX_FLOW_COLLECTIONS, DEFAULT_MAX_POLICY_BYTES};
use stormguard_toolkit::shape::ShapeFlags;
use stormguard_toolkit::sim::{Modifiers, Named, Scenario};

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
    Serve(Box<ServeArgs>),
    /// Validate and lint a policy file: each service's resolved policy, storm-risk
    /// warnings and a forecast of a thundering herd under it (exit 0 valid, 1 invalid).
    Check(CheckArgs),
    /// Simulate a thundering herd against a recovering server, in virtual time:
    /// what a retry strategy or a service's policy does to it (by default 1000 clients
    /// failing at once, 200 requests/s, a 10 s outage).
    Simulate(Box<SimulateArgs>),
    /// Search retry policies in the simulator for one that wastes fewer
    /// requests over a family of outages than a service's policy (or the
    /// simulator's full-jitter herd), serving its callers no later; print
    /// both side by side and the settings to paste into the policy file.
    Tune(TuneArgs),
    /// Print a service's resolved policy in gRPC's, Envoy's, Istio's or
    /// Linkerd's retry settings, and what that dialect cannot express.
    Render(RenderArgs),
    /// Show what changing a policy file does before it ships: per service,
    /// each resolved key that changes and where its new value comes from,
    /// services added and removed, lint warnings new and cleared, and the
    /// forecast before and after; either side may be a running daemon's URL
    /// (exit 0; 1 if a side is invalid or cannot be read; 2 if a forecast
    /// worsens past --threshold or a warning appears).
    Diff(DiffArgs),
}

#[derive(Args)]
struct DiffArgs {
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

#[derive(Args)]
struct RenderArgs {
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

#[derive(Args)]
struct TuneArgs {
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
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Draw the requests per second on the first seed, current against recommended,
    /// on every outage, to this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// The worlds `simulate` can put strategies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum World {
    /// A herd failing at once against a recovering server (the flags below set it).
    Herd,
    /// A metastable failure, after Marc Brooker's simple_collapse_sim: calls
    /// arrive at 40/s, 80/s from 20 s to 25 s, until 80 s; the server takes
    /// 1 s + 10 ms per request in progress, and finishes work its callers
    /// gave up on; callers time out after 3 s and try 3 times, at once.
    /// Replaces --clients, --capacity, --outage and --spread.
    Collapse,
    /// Calls arriving at --rate a second for 60 s against a dependency that
    /// fails --error-rate of requests at random and never runs out of
    /// capacity: what retries and their budgets add to the load (the JSON's
    /// `amplification`). Callers try 4 times unless --max-retries says.
    /// With --outage the dependency is down from t = 0 until then, and the
    /// JSON's `half_open_trials_per_window` shows the processes' breakers
    /// probing its return (default: no outage); with --capacity or a
    /// --dependency model it takes only that much once back. Calls arrive
    /// until --until. Replaces --clients and --spread.
    Errors,
}

#[derive(Args)]
struct SimulateArgs {
    /// The world to simulate.
    #[arg(long, value_enum, default_value = "herd")]
    scenario: World,
    /// A strategy to run; repeat for several. Default: full-jitter, or with --compare all of them.
    #[arg(long = "strategy", value_enum)]
    strategies: Vec<Named>,
    /// Run several strategies on the same scenario and print one table.
    #[arg(long)]
    compare: bool,
    #[command(flatten)]
    shape: ShapeFlags,
    /// With --scenario errors: first tries a second, in all. Default: 1000.
    #[arg(long, value_parser = count_in(0.01f64, 1_000_000.0))]
    rate: Option<f64>,
    /// With --scenario errors: when calls stop arriving. Default: 60s.
    #[arg(long, value_parser = duration_in(secs(1), secs(86_400)))]
    until: Option<Duration>,
    /// The share of requests the dependency fails at random, whatever its
    /// load, in [0, 1]. With --scenario errors, the scenario's (default 0.5);
    /// with a herd, on top of its outage and capacity (a dependency that
    /// recovers and then fails a share at random). Default: 0.
    #[arg(long, value_parser = stormguard_toolkit::flags::share)]
    error_rate: Option<f64>,
    /// The HTTP status the random failures are answered with: 503 (the
    /// default) says overload to a send gate, and 500 is an error that the
    /// default gate.overloadOn does not count.
    #[arg(long, default_value_t = 503, value_parser = count_in(500u16, 599))]
    error_status: u16,
    /// The dependency is this many backends behind a round-robin load
    /// balancer; --down of them refuse every request at once, and the
    /// capacity is the rest's share of it.
    #[arg(long, value_parser = count_in(1u32, 1_000))]
    backends: Option<u32>,
    /// With --backends: how many are down, for the whole run (fewer than --backends).
    #[arg(long, requires = "backends", value_parser = count_in(0u32, 999))]
    down: Option<u32>,
    /// The server rejects everything from t = 0 until then. Default: with
    /// --policy, the first outage of the file's `forecast:` block for the
    /// service, else 10s.
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    outage: Option<Duration>,
    /// A second outage, START:LASTING (e.g. 30s:5s): the server rejects everything again.
    #[arg(long, value_parser = stormguard_toolkit::flags::window)]
    second_outage: Option<(Duration, Duration)>,
    /// A brownout, START:LASTING:CAPACITY (e.g. 20s:20s:50): the server takes
    /// only CAPACITY requests a second meanwhile.
    #[arg(long, value_parser = stormguard_toolkit::flags::brownout)]
    brownout: Option<(Duration, Duration, u32)>,
    /// Clients first fail at random times in [0, spread) instead of all at t = 0.
    #[arg(long, default_value = "0s", value_parser = duration_in(secs(0), secs(86_400)))]
    spread: Duration,
    /// Give up after this many retries (clients that give up are counted).
    /// Default: until success; 2 in the collapse scenario; 3 in the errors
    /// scenario, where a --policy keeps its own.
    #[arg(long)]
    max_retries: Option<u32>,
    /// Time each attempt out after this long. Default: the strategy's
    /// (none for the named ones); 3s in the collapse scenario.
    #[arg(long, value_parser = duration_in(Duration::from_millis(1), secs(86_400)))]
    per_try_timeout: Option<Duration>,
    /// Add the library's retry budget (default settings) to each strategy.
    #[arg(long)]
    budget: bool,
    /// Add the library's retry budget (default settings) with its floor the
    /// fleet's (minRetriesPerSecond for all the processes together): the
    /// daemon divides it among the processes by their requests, each report
    /// interval (10 s), a --feedback-delay after each report.
    #[arg(long)]
    fleet_budget: bool,
    /// Add the library's circuit breaker (default settings) to each strategy.
    #[arg(long)]
    breaker: bool,
    /// Add the library's circuit breaker (default settings) with its
    /// half-open the fleet's: an open breaker sends trials only on slots
    /// the daemon grants, halfOpenMaxCalls at once for all the processes
    /// together, and the daemon closes every breaker when they succeed.
    #[arg(long)]
    fleet_breaker: bool,
    /// Add the library's send gate (default settings) to each strategy: one
    /// per process, pacing every attempt while the server is unwell. With
    /// --compare, each strategy runs without and with it, side by side.
    #[arg(long)]
    gate: bool,
    /// Add the send gate and pace every process's gate through the daemon,
    /// which learns one rate for the whole fleet and divides it by demand
    /// (a --policy whose gate is on is paced so already, as its fleet runs
    /// it). With --compare, each strategy runs without and with it, side by side.
    #[arg(long)]
    fleet: bool,
    /// A --policy whose gate is on paces each process alone, as callers that
    /// never ask the daemon for pace (the client's fleet pacing turned off).
    #[arg(long, requires = "policy", conflicts_with = "fleet")]
    no_fleet_pacing: bool,
    /// With a shared pace store: a replica's round trip to it. Default: 1ms.
    #[arg(long, value_parser = duration_in(secs(0), secs(10)))]
    store_delay: Option<Duration>,
    /// With a shared pace store: it stops answering at this time, for good
    /// (Redis killed), and each replica paces alone from then on.
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    store_lost_at: Option<Duration>,
    /// With --fleet: the time from a process's report to its grant taking effect.
    #[arg(long, default_value = "100ms", value_parser = duration_in(secs(0), secs(60)))]
    feedback_delay: Duration,
    /// Seed of the random source: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual time after which the run stops; clients still retrying count as unfinished.
    #[arg(long, default_value = "1h", value_parser = duration_in(secs(1), secs(86_400)))]
    horizon: Duration,
    /// A policy file whose --service policy to simulate too.
    #[arg(long, requires = "service")]
    policy: Option<PathBuf>,
    /// The service (in --policy) whose resolved policy to simulate.
    #[arg(long, requires = "policy")]
    service: Option<String>,
    /// Print JSON: one object, or an array with --compare.
    #[arg(long)]
    json: bool,
    /// Draw the per-second histograms to this SVG file, one panel per strategy, same axes.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    /// The retry-policy file (in Kubernetes, the ConfigMap's mounted key).
    #[arg(long, env = "STORMGUARD_POLICY", default_value = "policies/retry-policy.yaml")]
    policy: PathBuf,
    /// Address and port to listen on.
    #[arg(long, env = "STORMGUARD_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// File holding the admin API's bearer token. The token can also be given
    /// in STORMGUARD_ADMIN_TOKEN; with neither, the admin API answers 403.
    #[arg(long, env = "STORMGUARD_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Serve the admin API on this address only (e.g. 127.0.0.1:8081), not on
    /// --listen, so that a NetworkPolicy can fence it off.
    #[arg(long, env = "STORMGUARD_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Quiet time after a file event before reloading.
    #[arg(long, default_value = "50ms", value_parser = duration_in(secs(0), secs(10)))]
    debounce: Duration,
    /// Interval of the periodic re-check, for file systems whose events do not arrive.
    #[arg(long, default_value = "10s", value_parser = duration_in(millis(100), secs(3600)))]
    recheck_interval: Duration,
    /// Longest `?wait=` a long-poll may ask for.
    #[arg(long, default_value = "5m", value_parser = duration_in(secs(1), secs(3600)))]
    max_wait: Duration,
    /// Long-polls that may wait at once; more get 503 with Retry-After.
    #[arg(long, default_value_t = 10_000, value_parser = count_in(1usize, 1_000_000))]
    max_long_polls: usize,
    /// /admin/validate runs at once (each simulates every distinct policy); more get 503 with Retry-After.
    #[arg(long, default_value_t = 2, value_parser = count_in(1usize, 64))]
    max_validations: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 1 << 20, value_parser = count_in(1024usize, 1 << 30))]
    max_body_bytes: usize,
    /// Reported services not in the policy file that get a label of their own; others count as "other".
    #[arg(long, default_value_t = 100, value_parser = count_in(0usize, 100_000))]
    max_unlisted_services: usize,
    /// Distinct endpoint labels per service; others count as "other".
    #[arg(long, default_value_t = 100, value_parser = count_in(1usize, 100_000))]
    max_endpoints_per_service: usize,
    /// Highest retry attempt number with a label of its own; higher ones count as "other".
    #[arg(long, default_value_t = 10, value_parser = count_in(1u32, 1000))]
    max_attempt_label: u32,
    /// Reporting instances whose states (circuit, in flight, budget) are kept.
    #[arg(long, default_value_t = 10_000, value_parser = count_in(1usize, 10_000_000))]
    max_instances: usize,
    /// An instance that has not reported for this long no longer counts in circuit_breaker_state and the other state gauges.
    #[arg(long, default_value = "60s", value_parser = duration_in(secs(1), secs(86_400)))]
    instance_ttl: Duration,
    /// How long a report batch's number is remembered, so that a batch sent
    /// again (its answer was lost) is counted once.
    #[arg(long, default_value = "10m", value_parser = duration_in(secs(1), secs(86_400)))]
    batch_window: Duration,
    /// A reported service not in the policy file that has not reported for
    /// this long loses its series, freeing its place under --max-unlisted-services.
    #[arg(long, default_value = "1h", value_parser = duration_in(secs(60), secs(7 * 86_400)))]
    label_ttl: Duration,
    #[command(flatten)]
    policy_limits: PolicyLimits,
    /// Time a client has to send a request's headers.
    #[arg(long, default_value = "10s", value_parser = duration_in(millis(100), secs(3600)))]
    header_read_timeout: Duration,
    /// Largest request line plus headers, in bytes (8192 at least); larger requests get 431.
    #[arg(long, default_value_t = 64 * 1024, value_parser = count_in(stormguard::server::MIN_HEADER_BYTES, 16 << 20))]
    max_header_bytes: usize,
    /// Time a client has to send a request's body, once its headers are in.
    #[arg(long, default_value = "10s", value_parser = duration_in(millis(100), secs(3600)))]
    body_read_timeout: Duration,
    /// Time a client may take none of an answer being written (it stopped
    /// reading) before its connection is closed.
    #[arg(long, default_value = "10s", value_parser = duration_in(millis(100), secs(3600)))]
    write_timeout: Duration,
    /// After SIGTERM, keep serving this long with /readyz failing, so that
    /// Kubernetes takes the pod out of its Service before the listener closes.
    #[arg(long, default_value = "0s", value_parser = duration_in(secs(0), secs(600)))]
    shutdown_delay: Duration,
    /// How long requests in flight may take to finish after SIGTERM.
    #[arg(long, default_value = "10s", value_parser = duration_in(secs(0), secs(600)))]
    shutdown_grace: Duration,
    /// Serving threads (default: one per CPU). Each runs its own event loop.
    #[arg(long, env = "STORMGUARD_WORKERS", value_parser = count_in(1usize, 1024))]
    workers: Option<usize>,
    /// Service-account tokens on reports and pace asks: off (anyone who can
    /// reach the port may report), optional (a token, when sent, must be
    /// valid; reports without one are counted apart), required (401 without
    /// a valid token).
    #[arg(long, env = "STORMGUARD_TOKENS", value_enum, default_value = "off")]
    tokens: Mode,
    /// The token issuer's public keys: a JSON Web Key Set file (in
    /// Kubernetes, the output of `kubectl get --raw /openid/v1/jwks`,
    /// mounted from a ConfigMap), read again when it changes.
    #[arg(long, env = "STORMGUARD_TOKEN_KEYS")]
    token_keys: Option<PathBuf>,
    /// The audience tokens must be bound to: the projected token volume's `audience`.
    #[arg(long, env = "STORMGUARD_TOKEN_AUDIENCE", default_value = "stormguard")]
    token_audience: String,
    /// The issuer tokens must come from (the cluster's service-account
    /// issuer, e.g. https://kubernetes.default.svc); any issuer if unset.
    #[arg(long, env = "STORMGUARD_TOKEN_ISSUER")]
    token_issuer: Option<String>,
    /// Serve HTTPS only, on both listeners, with this PEM certificate chain
    /// (the daemon's certificate first); read again when it changes, as
    /// cert-manager renews it. Needs --tls-key.
    #[arg(long, env = "STORMGUARD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert; read again when it changes.
    #[arg(long, env = "STORMGUARD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require every client to present a certificate signed by one of the
    /// CAs in this PEM file (mutual TLS); read again when it changes.
    #[arg(long, env = "STORMGUARD_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Share every paced dependency's pace with the other replicas through
    /// this Redis, redis://[user:password@]HOST:PORT[/DB] (rediss:// for
    /// TLS): they then pace a fleet as one daemon does, and count a report
    /// batch sent again to another replica once. Without it each replica
    /// paces the processes that reach it; with it, a replica that loses the
    /// store paces alone within a second, and shares again when it is back.
    #[arg(long, env = "STORMGUARD_PACE_STORE")]
    pace_store: Option<String>,
    /// A file holding the pace store's password (a mounted Secret), so that
    /// it sits neither in the URL nor in the manifest. The password can also
    /// be given in STORMGUARD_PACE_STORE_PASSWORD.
    #[arg(long, env = "STORMGUARD_PACE_STORE_PASSWORD_FILE", requires = "pace_store")]
    pace_store_password_file: Option<PathBuf>,
    /// With a rediss:// pace store: the PEM file of the CA that signed its
    /// certificate, trusted instead of the system's CAs (a cluster's own CA).
    #[arg(long, env = "STORMGUARD_PACE_STORE_CA", requires = "pace_store")]
    pace_store_ca: Option<PathBuf>,
}

#[derive(Args)]
struct CheckArgs {
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

/// Bounds on a policy file, for `serve` (also on `/admin/validate`) and `check`.
#[derive(Args)]
struct PolicyLimits {
    /// Largest policy file in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_POLICY_BYTES, value_parser = count_in(64usize, 64 << 20))]
    max_policy_bytes: usize,
    /// Most flow collections ([ or {) in a policy file; deep nesting makes YAML parsing slow.
    #[arg(long, default_value_t = DEFAULT_MAX_FLOW_COLLECTIONS, value_parser = count_in(1usize, 1_000_000))]
    max_flow_collections: usize,
}

impl PolicyLimits {
    fn load_limits(&self) -> LoadLimits {
        LoadLimits {
            max_bytes: self.max_policy_bytes,
            max_flow_collections: self.max_flow_collections,
        }
    }
}

/// The daemon allocates and frees small buffers on every request; mimalloc
/// does that markedly faster than glibc's malloc (see bench/serve.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check(args) => {
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
        Command::Serve(args) => serve(*args),
        Command::Simulate(args) => simulate(*args),
        Command::Tune(args) => tune(args),
        Command::Render(args) => render(args),
        Command::Diff(args) => diff(args),
    }
}

fn diff(args: DiffArgs) -> ExitCode {
    let Ok((old, new)) = diff_sides(&args) else {
        return ExitCode::from(1);
    };
    let diff = stormguard_toolkit::diff::diff(&old, &new, args.threshold);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff).expect("plain data"));
    } else {
        print!("{}", stormguard_toolkit::diff::render(&diff));
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

/// What the daemon at `url` serves, as the policy file that would serve it.
fn daemon_policies(
    url: &str,
    ca_file: Option<&std::path::Path>,
    compared: Option<&PolicyDocument>,
) -> Result<PolicyDocument, String> {
    let mut client = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
        client = certificates
            .into_iter()
            .fold(client.tls_built_in_root_certs(false), |client, ca| {
                client.add_root_certificate(ca)
            });
    }
    let client = client.build().map_err(|e| e.to_string())?;
    let endpoint = format!(
        "{}/v1/policies",
        url.trim_end_matches('/').trim_end_matches("/v1/policies")
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let body = runtime.block_on(async {
        let failed = |e: reqwest::Error| format!("GET {endpoint}: {}", with_causes(&e));
        let response = client.get(&endpoint).send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {endpoint} answered {status}"));
        }
        response.bytes().await.map_err(failed)
    })?;
    stormguard_toolkit::diff::served_document(&endpoint, &body, compared).map_err(|e| e.to_string())
}

/// `error` and what caused it, down to the root (`connection refused`).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text = format!("{text}: {next}");
        cause = next.source();
    }
    text
}

fn render(args: RenderArgs) -> ExitCode {
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

fn tune(args: TuneArgs) -> ExitCode {
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

fn simulate(mut args: SimulateArgs) -> ExitCode {
    let collapse = (args.scenario == World::Collapse).then(stormguard_toolkit::sim::Collapse::brooker);
    if let Some(model) = collapse {
        // Brooker's clients: three tries, 3 s each, no wait between.
        args.max_retries.get_or_insert(2);
        args.per_try_timeout.get_or_insert(Duration::from_secs(3));
        if args.strategies.is_empty() && args.policy.is_none() {
            args.strategies.push(Named::Immediate);
        }
        args.horizon = args.horizon.min(model.until);
        args.outage = Some(Duration::ZERO);
    }
    let limited = args.shape.capacity.is_some()
        || args.shape.dependency.is_some_and(|d| d != DependencyModel::Quota)
        || args.shape.burst.is_some()
        || args.shape.workers.is_some()
        || args.shape.queue.is_some();
    let errors = match (args.scenario, args.rate, args.error_rate) {
        (World::Errors, _, _) => Some(stormguard_toolkit::sim::Errors {
            until: args.until.unwrap_or(Duration::from_secs(60)),
            limited,
            ..stormguard_toolkit::sim::Errors::new(
                args.rate.unwrap_or(1000.0),
                args.error_rate.unwrap_or(0.5),
            )
        }),
        (_, Some(_), _) => {
            eprintln!("--rate: only with --scenario errors");
            return ExitCode::from(1);
        }
        _ if args.until.is_some() => {
            eprintln!("--until: only with --scenario errors, whose calls arrive until then");
            return ExitCode::from(1);
        }
        (World::Collapse, _, Some(_)) => {
            eprintln!("--error-rate: not with --scenario collapse, whose server fails by its load alone");
            return ExitCode::from(1);
        }
        _ => None,
    };
    if limited && args.scenario == World::Collapse {
        eprintln!(
            "--capacity, --dependency, --burst, --workers, --queue: not with --scenario collapse, whose server \
             slows by its own model"
        );
        return ExitCode::from(1);
    }
    let backends = match (args.backends, args.down.unwrap_or(0)) {
        (Some(count), down) if down >= count => {
            eprintln!("--down {down}: must be fewer than --backends {count}");
            return ExitCode::from(1);
        }
        (Some(_), _) if collapse.is_some() => {
            eprintln!("--backends: not with --scenario collapse, whose server fails by its load alone");
            return ExitCode::from(1);
        }
        (Some(count), down) => Some(stormguard_toolkit::sim::Backends { count, down }),
        (None, _) => None,
    };
    if errors.is_some() {
        // Three retries, as a client library's default: 1.875 attempts a
        // call at 50 % errors with nothing to cap them; a --policy keeps its own.
        if args.policy.is_none() {
            args.max_retries.get_or_insert(3);
        }
        args.outage.get_or_insert(Duration::ZERO);
    }
    let stated = match args.policy.as_deref().zip(args.service.as_deref()) {
        Some((path, service)) => match stormguard_toolkit::simulate::resolved_policy(path, service) {
            Ok(resolved) => resolved.herd,
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::from(1);
            }
        },
        None => ForecastScenario::default(),
    };
    let herd = args.shape.apply(stated);
    if args.store_lost_at.is_some() && !herd.fleet.pace_store {
        eprintln!("--store-lost-at: the replicas share no pace store (give --pace-store, or paceStore: true in the file's forecast: block)");
        return ExitCode::from(1);
    }
    let outage = args.outage.unwrap_or(herd.outages[0]);
    let store = args
        .store_delay
        .unwrap_or(stormguard_toolkit::sim::STORE_ROUND_TRIP);
    let request = stormguard_toolkit::simulate::Request {
        scenario: Scenario {
            second_outage: args.second_outage,
            collapse,
            errors,
            random_failures: if errors.is_none() {
                args.error_rate.unwrap_or(0.0)
            } else {
                0.0
            },
            backends,
            random_failure_status: args.error_status,
            brownout: args
                .brownout
                .map(|(at, lasting, capacity)| stormguard_toolkit::sim::Brownout {
                    at,
                    lasting,
                    capacity,
                }),
            spread: args.spread,
            pace_store: herd.fleet.pace_store.then_some(store),
            store_lost_at: args.store_lost_at,
            feedback_delay: args.feedback_delay,
            horizon: args.horizon,
            seed: args.seed,
            ..Scenario::forecast(&herd, outage)
        },
        strategies: args.strategies,
        policy: args.policy.zip(args.service),
        modifiers: Modifiers {
            budget: args.budget,
            breaker: args.breaker,
            gate: args.gate,
            fleet: args.fleet,
            gates_alone: args.no_fleet_pacing,
            fleet_budget: args.fleet_budget,
            fleet_breaker: args.fleet_breaker,
            max_retries: args.max_retries,
            per_try_timeout: args.per_try_timeout,
        },
        compare: args.compare,
        json: args.json,
        svg: args.svg,
    };
    match stormguard_toolkit::simulate::simulate(&request) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let admin_token = admin_token(args.admin_token_file.as_deref());
    let config = ServeConfig {
        policy: args.policy,
        listen: args.listen,
        admin_token,
        admin_listen: args.admin_listen,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            policy: args.policy_limits.load_limits(),
            max_wait: args.max_wait,
            max_long_polls: args.max_long_polls,
            max_validations: args.max_validations,
            reports: ReportLimits {
                max_unlisted_services: args.max_unlisted_services,
                max_endpoints_per_service: args.max_endpoints_per_service,
                max_attempt_label: args.max_attempt_label,
                max_instances: args.max_instances,
                instance_ttl: args.instance_ttl,
                batch_window: args.batch_window,
                label_ttl: args.label_ttl,
            },
            header_read_timeout: args.header_read_timeout,
            max_header_bytes: args.max_header_bytes,
            body_read_timeout: args.body_read_timeout,
            write_timeout: args.write_timeout,
        },
        watch: WatchConfig {
            debounce: args.debounce,
            recheck: args.recheck_interval,
        },
        shutdown_delay: args.shutdown_delay,
        shutdown_grace: args.shutdown_grace,
        workers: args
            .workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        tokens: args.tokens,
        token_rules: args.token_keys.map(|keys_file| TokenRules {
            audience: args.token_audience,
            issuer: args.token_issuer,
            keys_file,
        }),
        tls: args.tls_cert.zip(args.tls_key).map(|(cert, key)| TlsFiles {
            cert,
            key,
            client_ca: args.tls_client_ca,
        }),
        pace_store: args.pace_store.map(|url| stormguard::serve::PaceStoreConfig {
            url,
            password_file: args.pace_store_password_file,
            ca: args.pace_store_ca,
        }),
    };
    match stormguard::serve::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The admin token's file, else STORMGUARD_ADMIN_TOKEN.
fn admin_token(file: Option<&std::path::Path>) -> AdminSecret {
    match (file, std::env::var("STORMGUARD_ADMIN_TOKEN")) {
        (Some(file), _) => AdminSecret::File(file.to_path_buf()),
        (None, Ok(token)) => AdminSecret::Token(token),
        (None, Err(_)) => AdminSecret::None,
    }
}
