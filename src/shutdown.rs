//! The daemon's shutdown signal, as every part that must react to it sees it.

use tokio::sync::watch;

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers stay `Send`.
    let _ = shutdown.wait_for(|down| *down).await;
}
