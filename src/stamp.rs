//! Telling that a file changed without reading it: for secrets and keys
//! mounted from Kubernetes Secrets and ConfigMaps, which are replaced, not
//! edited, when they rotate.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

/// A file's inode, size and modification time: when any differs, it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp(u64, u64, Option<SystemTime>);

impl FileStamp {
    /// The stamp of the file at `path` now.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        Ok(Self(meta.ino(), meta.len(), meta.modified().ok()))
    }
}
