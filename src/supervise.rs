//! Keeping the policy file watcher running. Hot reload is the daemon's
//! point: a watcher task that dies (a panic in a dependency, a bug) must not
//! leave a daemon that serves on, ready and silent, with a policy that no
//! longer follows its file. The supervisor logs why it died, counts it
//! (`stormguard_reload_task_restarts_total`), marks the daemon not ready
//! while it is down, and starts it again after a backoff.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::DaemonMetrics;
use crate::shutdown::shutting_down;

/// First wait before a restart; it doubles with each quick failure.
const FIRST_RESTART: Duration = Duration::from_secs(1);
/// Longest wait before a restart.
const MAX_RESTART: Duration = Duration::from_secs(60);
/// A watcher that ran this long before dying starts the backoff afresh.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Whether the watcher runs, as `/readyz` reports it.
#[derive(Debug)]
pub struct WatcherHealth(AtomicBool);

impl Default for WatcherHealth {
    fn default() -> Self {
        Self(AtomicBool::new(true))
    }
}

impl WatcherHealth {
    /// True while the watcher runs.
    pub fn is_up(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// Runs `start(restarted)` as a task until it returns (at shutdown), starting
/// it again each time it panics. `restarted` is false only the first time.
pub async fn supervise<F, Fut>(
    mut start: F,
    metrics: Arc<DaemonMetrics>,
    health: Arc<WatcherHealth>,
    mut shutdown: watch::Receiver<bool>,
) where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut quick_failures = 0u32;
    let mut restarted = false;
    loop {
        health.0.store(true, Relaxed);
        let began = Instant::now();
        let why = match tokio::spawn(start(restarted)).await {
            Ok(()) => return,
            Err(error) if error.is_cancelled() => return,
            Err(error) => panic_message(error.into_panic()),
        };
        health.0.store(false, Relaxed);
        metrics.watcher_restarted();
        if began.elapsed() >= HEALTHY_RUN {
            quick_failures = 0;
        }
        let delay = FIRST_RESTART
            .saturating_mul(1 << quick_failures.min(6))
            .min(MAX_RESTART);
        quick_failures += 1;
        tracing::error!(
            "the policy file watcher stopped ({why}); policy changes are not picked up until it restarts in {delay:?}"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutting_down(&mut shutdown) => return,
        }
        restarted = true;
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_string(),
            Err(_) => "a panic".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test(start_paused = true)]
    async fn a_watcher_that_panics_is_counted_marked_down_and_restarted() {
        let registry = crate::metrics::Registry::new();
        let metrics = Arc::new(DaemonMetrics::new(registry.families()));
        let health = Arc::new(WatcherHealth::default());
        let (stop, shutdown) = watch::channel(false);
        let starts = Arc::new(AtomicU32::new(0));
        let restarted_flags = Arc::new(std::sync::Mutex::new(Vec::new()));
        let supervisor = tokio::spawn(supervise(
            {
                let (starts, flags) = (starts.clone(), restarted_flags.clone());
                move |restarted| {
                    let n = starts.fetch_add(1, Relaxed);
                    flags.lock().unwrap().push(restarted);
                    async move {
                        if n < 2 {
                            panic!("injected failure {n}");
                        }
                        std::future::pending::<()>().await;
                    }
                }
            },
            metrics.clone(),
            health.clone(),
            shutdown,
        ));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!health.is_up(), "down while waiting to restart");
        assert_eq!(starts.load(Relaxed), 1);
        tokio::time::sleep(FIRST_RESTART).await;
        assert_eq!(starts.load(Relaxed), 2, "restarted after the first backoff");
        tokio::time::sleep(FIRST_RESTART * 2).await;
        assert_eq!(starts.load(Relaxed), 3, "the second wait doubles");
        assert!(health.is_up());
        let text = registry.text(tokio::time::Instant::now());
        assert!(text.contains("stormguard_reload_task_restarts_total 2"), "{text}");
        assert_eq!(*restarted_flags.lock().unwrap(), [false, true, true]);
        stop.send_replace(true);
        supervisor.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_that_returns_is_not_restarted() {
        let (_stop, shutdown) = watch::channel(false);
        let starts = Arc::new(AtomicU32::new(0));
        let counter = starts.clone();
        supervise(
            move |_| {
                counter.fetch_add(1, Relaxed);
                async {}
            },
            Arc::new(DaemonMetrics::new(&prometheus::Registry::new())),
            Arc::new(WatcherHealth::default()),
            shutdown,
        )
        .await;
        assert_eq!(starts.load(Relaxed), 1);
    }
}
