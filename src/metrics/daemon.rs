//! The families the daemon keeps about itself: policy reloads, HTTP
//! requests, the file watcher, and the reload outcomes of the files it follows.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry,
};

use axum::http::StatusCode;

use stormguard_toolkit::policy::ContentHash;

/// Reload outcomes as `result` label values.
pub const RELOAD_SUCCESS: &str = "success";
/// See [`RELOAD_SUCCESS`].
pub const RELOAD_FAILURE: &str = "failure";

/// The outcomes of reloading a file the daemon follows (the TLS pair, the
/// token issuer's keys): `<prefix>_reloads_total{result}` and
/// `<prefix>_last_reload_success`, 1 until a reload fails and while the
/// previous contents stay in use.
#[derive(Clone)]
pub struct ReloadOutcomes {
    total: IntCounterVec,
    last_success: IntGauge,
}

impl ReloadOutcomes {
    /// The two families for `what`, e.g. "the TLS certificate and key files".
    pub fn new(prefix: &str, what: &str) -> Self {
        let total = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_reloads_total"),
                format!(
                    "Reloads of {what} after they changed, by result; after a failure the ones in use stay."
                ),
            ),
            &["result"],
        )
        .expect("valid metric");
        for result in [RELOAD_SUCCESS, RELOAD_FAILURE] {
            total.with_label_values(&[result]);
        }
        let last_success = IntGauge::new(
            format!("{prefix}_last_reload_success"),
            format!("1 if the last reload of {what} succeeded (or none was needed), 0 while a failed one keeps the previous in use."),
        )
        .expect("valid metric");
        last_success.set(1);
        Self { total, last_success }
    }

    /// Counts one reload.
    pub fn record(&self, succeeded: bool) {
        let result = if succeeded { RELOAD_SUCCESS } else { RELOAD_FAILURE };
        self.total.with_label_values(&[result]).inc();
        self.last_success.set(i64::from(succeeded));
    }

    /// Reloads counted with `result`.
    pub fn count(&self, result: &str) -> u64 {
        self.total.with_label_values(&[result]).get()
    }

    /// Adds both families to `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.total.clone()))?;
        registry.register(Box::new(self.last_success.clone()))
    }
}

/// Every family the daemon exports about itself.
pub struct DaemonMetrics {
    reloads: IntCounterVec,
    last_reload_success: IntGauge,
    last_reload_timestamp: Gauge,
    policy_version: IntGauge,
    policy_info: GaugeVec,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    watcher_restarts: IntCounter,
}

impl DaemonMetrics {
    /// Every family, registered in `registry`.
    pub fn new(registry: &Registry) -> Self {
        let reloads = IntCounterVec::new(
            Opts::new(
                "stormguard_policy_reloads_total",
                "Policy reload attempts, by result.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let last_reload_success = IntGauge::new(
            "stormguard_policy_last_reload_success",
            "1 if the last policy reload succeeded, 0 if it failed and the previous policy is still served.",
        )
        .expect("valid metric");
        let last_reload_timestamp = Gauge::new(
            "stormguard_policy_last_reload_timestamp_seconds",
            "Unix time of the last policy reload attempt, successful or not.",
        )
        .expect("valid metric");
        let policy_version = IntGauge::new(
            "stormguard_policy_version",
            "The served policy's version: the first 48 bits of its SHA-256, equal on every replica serving the same file.",
        )
        .expect("valid metric");
        let policy_info = GaugeVec::new(
            Opts::new(
                "stormguard_policy_info",
                "Always 1; `hash` is the SHA-256 of the served policy file.",
            ),
            &["hash"],
        )
        .expect("valid metric");
        let http_requests = IntCounterVec::new(
            Opts::new(
                "stormguard_http_requests_total",
                "HTTP requests served, by route and status code.",
            ),
            &["route", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "stormguard_http_request_duration_seconds",
                "Time to answer HTTP requests, by route (long-polls are their own route).",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
                30.0, 120.0,
            ]),
            &["route"],
        )
        .expect("valid metric");
        let watcher_restarts = IntCounter::new(
            "stormguard_reload_task_restarts_total",
            "Times the policy file watcher stopped unexpectedly and was restarted; hot reload is off until it is.",
        )
        .expect("valid metric");
        for collector in [
            Box::new(reloads.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(last_reload_success.clone()),
            Box::new(last_reload_timestamp.clone()),
            Box::new(policy_version.clone()),
            Box::new(policy_info.clone()),
            Box::new(http_requests.clone()),
            Box::new(http_duration.clone()),
            Box::new(watcher_restarts.clone()),
        ] {
            registry
                .register(collector)
                .expect("each family is registered once");
        }
        for result in [RELOAD_SUCCESS, RELOAD_FAILURE] {
            reloads.with_label_values(&[result]);
        }
        Self {
            reloads,
            last_reload_success,
            last_reload_timestamp,
            policy_version,
            policy_info,
            http_requests,
            http_duration,
            watcher_restarts,
        }
    }

    /// Counts a restart of the policy file watcher.
    pub fn watcher_restarted(&self) {
        self.watcher_restarts.inc();
    }

    /// Records that `hash` is now served.
    pub fn policy_served(&self, hash: &ContentHash) {
        self.policy_version.set(hash.version_number() as i64);
        self.policy_info.reset();
        self.policy_info.with_label_values(&[&hash.hex()]).set(1.0);
    }

    /// Records a reload attempt's outcome.
    pub fn reload_attempted(&self, success: bool, unix_seconds: f64) {
        let result = if success { RELOAD_SUCCESS } else { RELOAD_FAILURE };
        self.reloads.with_label_values(&[result]).inc();
        self.last_reload_success.set(i64::from(success));
        self.last_reload_timestamp.set(unix_seconds);
    }

    /// The request counter of `route` for `status`.
    pub fn http_requests(&self, route: &str, status: StatusCode) -> IntCounter {
        self.http_requests.with_label_values(&[route, status.as_str()])
    }

    /// The answer-time histogram of `route`.
    pub fn http_duration(&self, route: &str) -> Histogram {
        self.http_duration.with_label_values(&[route])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_reload_families() {
        let registry = super::super::Registry::new();
        let metrics = DaemonMetrics::new(registry.families());
        metrics.policy_served(&ContentHash::of(b"x"));
        metrics.reload_attempted(false, 12.0);
        metrics
            .http_requests("/v1/policies", StatusCode::NOT_MODIFIED)
            .inc();
        let text = registry.text(tokio::time::Instant::now());
        assert!(text.contains("stormguard_policy_reloads_total{result=\"failure\"} 1"));
        assert!(text.contains("stormguard_policy_reloads_total{result=\"success\"} 0"));
        assert!(text.contains("stormguard_policy_last_reload_success 0"));
        assert!(text.contains("stormguard_policy_last_reload_timestamp_seconds 12"));
        assert!(text.contains(&format!(
            "stormguard_policy_info{{hash=\"{}\"}} 1",
            ContentHash::of(b"x").hex()
        )));
        assert!(text.contains("stormguard_http_requests_total{route=\"/v1/policies\",status=\"304\"} 1"));
    }
}
