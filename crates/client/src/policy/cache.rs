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

/// Writes `cached` to `path` through a staged file of this write's own (the
/// processes of a pre-forking server share one cache path), so a reader
/// never sees half of it. A cache that cannot be written is logged.
pub(super) async fn save(path: &Path, cached: Cached) {
    let path = path.to_path_buf();
    let write = tokio::task::spawn_blocking(move || write_staged(&path, &cached));
    if let Ok(Err(error)) = write.await {
        tracing::warn!(%error, "cannot write the stormguard policy cache");
    }
}

fn write_staged(path: &Path, cached: &Cached) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(cached).map_err(std::io::Error::other)?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut staged = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(directory)?;
    std::io::Write::write_all(&mut staged, &bytes)?;
    staged.persist(path).map_err(|error| error.error)?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use stormguard_core::policy::{PolicySource, RetryPolicy};

    use super::*;

    fn one_policy() -> Cached {
        let mut cached = Cached::default();
        let policy = ResolvedPolicy {
            source: PolicySource::Defaults,
            overridden: Vec::new(),
            policy: RetryPolicy::default(),
        };
        cached.insert("payments", &policy, Some("\"v1\""));
        cached
    }

    #[test]
    fn processes_sharing_a_cache_each_write_a_staged_file_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.json");
        // Another process's staged file, in the way of a name fixed by the path.
        std::fs::create_dir(dir.path().join("cache.tmp")).unwrap();
        write_staged(&path, &one_policy()).unwrap();
        let written: Cached = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(written.version("payments").is_some());
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["cache.json", "cache.tmp"], "no staged file left behind");
    }

    #[test]
    fn a_cache_that_cannot_be_written_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.json");
        std::fs::create_dir(&path).unwrap();
        assert!(write_staged(&path, &one_policy()).is_err());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "only the directory in the way"
        );
    }
}
