//! The last good policies on disk, for starts while the daemon is down.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use stormguard_core::policy::ResolvedPolicy;

use super::Version;

/// What the cache file holds: each watched service's last good policy.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct Cached {
    services: BTreeMap<String, CachedPolicy>,
}

#[derive(Serialize, Deserialize)]
struct CachedPolicy {
    etag: Option<String>,
    policy: ResolvedPolicy,
}

impl Cached {
    /// Remembers `policy`, at version `etag`, for `service`.
    pub(super) fn insert(&mut self, service: &str, policy: &ResolvedPolicy, etag: Option<&str>) {
        let entry = CachedPolicy {
            etag: etag.map(str::to_string),
            policy: policy.clone(),
        };
        self.services.insert(service.to_string(), entry);
    }

    /// The cached version of `service`, validated; `None` if there is none
    /// or it is not valid (said in the log).
    pub(super) fn version(&self, service: &str) -> Option<Version> {
        let entry = self.services.get(service)?;
        match Version::new(entry.policy.clone(), entry.etag.clone()) {
            Ok(version) => Some(version),
            Err(error) => {
                tracing::warn!(service, %error, "the cached stormguard policy is not valid; ignoring it");
                None
            }
        }
    }
}

/// Writes `cached` to `path` through a staged file, so a reader never sees half of it.
pub(super) async fn save(path: &Path, cached: Cached) {
    let path = path.to_path_buf();
    let write = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&cached).map_err(std::io::Error::other)?;
        let staged = path.with_extension("tmp");
        std::fs::write(&staged, bytes)?;
        std::fs::rename(&staged, &path)
    });
    if let Ok(Err(error)) = write.await {
        tracing::warn!(%error, "cannot write the stormguard policy cache");
    }
}

/// The cache at `path`; empty if there is none or it cannot be read (said in the log).
pub(super) async fn load(path: &Path) -> Cached {
    let read_path = path.to_path_buf();
    let bytes = match tokio::task::spawn_blocking(move || std::fs::read(read_path)).await {
        Ok(Ok(bytes)) => bytes,
        _ => return Cached::default(),
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|error| {
        tracing::warn!(path = %path.display(), %error, "the stormguard policy cache is unreadable; ignoring it");
        Cached::default()
    })
}
