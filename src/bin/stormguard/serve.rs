//! `stormguard serve`: the daemon's flags, turned into its configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::policy_limits::PolicyLimits;
use clap::Args;
use stormguard::identity::{Mode, TokenRules};
use stormguard::reports::ReportLimits;
use stormguard::serve::{AdminSecret, ServeConfig};
use stormguard::server::Limits;
use stormguard::tls::TlsFiles;
use stormguard::watch::WatchConfig;
use stormguard_toolkit::flags::{count_in, duration_in, millis, secs};

#[derive(Args)]
pub struct ServeArgs {
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

/// Runs `stormguard serve`.
pub fn run(args: ServeArgs) -> ExitCode {
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
