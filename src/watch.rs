//! Watching the policy file for changes.
//!
//! The watch is on the file's directory, not the file: kubelet updates a
//! ConfigMap by swapping the `..data` symlink, editors rename a new file over
//! the old one, and both replace the inode a file watch would be on. Events
//! are debounced; a slow periodic re-check covers file systems whose events
//! never arrive and re-arms the watch if the directory was removed and came back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout, Instant, MissedTickBehavior};

use crate::reload::{Reloader, Trigger};

/// How the watcher paces reloads.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// Quiet time after the last event before reloading; a burst of events is
    /// waited out for at most four times this.
    pub debounce: Duration,
    /// Interval of the periodic re-check.
    pub recheck: Duration,
}

/// A watch on a policy file's directory, armed before the file is first
/// loaded so that no change after the load can go unseen.
pub struct FileWatch {
    dir: PathBuf,
    watcher: Option<RecommendedWatcher>,
    armed: Option<DirId>,
    events: mpsc::Receiver<()>,
}

impl FileWatch {
    /// Starts watching the directory of `path`. If file events are not
    /// available, the periodic re-check is all there is, and a warning says so.
    pub fn arm(path: &Path) -> Self {
        let dir = directory_of(path);
        let (tx, events) = mpsc::channel(1);
        let mut watcher = match new_watcher(path, tx) {
            Ok(watcher) => Some(watcher),
            Err(e) => {
                tracing::warn!("cannot watch for file events ({e}); relying on the periodic re-check");
                None
            }
        };
        let armed = arm(watcher.as_mut(), &dir, None);
        Self {
            dir,
            watcher,
            armed,
            events,
        }
    }

    /// Reloads on every change until `shutdown` turns true.
    pub async fn run(
        mut self,
        reloader: Arc<Reloader>,
        config: WatchConfig,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut recheck = tokio::time::interval_at(Instant::now() + config.recheck, config.recheck);
        recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some(()) = self.events.recv() => {
                    debounce(&mut self.events, config.debounce).await;
                    reloader.reload(Trigger::Watch).await;
                }
                _ = recheck.tick() => {
                    self.armed = arm(self.watcher.as_mut(), &self.dir, self.armed);
                    reloader.reload(Trigger::Recheck).await;
                }
                () = crate::serve::shutting_down(&mut shutdown) => return,
            }
        }
    }
}

/// The directory to watch: the file's parent, or `.` for a bare file name.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn new_watcher(path: &Path, tx: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let file_name = path.file_name().map(OsString::from).unwrap_or_default();
    notify::recommended_watcher(move |event: notify::Result<Event>| match event {
        Ok(event) if is_relevant(&event, &file_name) => {
            // A full channel already holds a pending signal; one is enough.
            let _ = tx.try_send(());
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("file watch error: {e}"),
    })
}

/// Events that may change what the policy path reads: the file itself, and
/// kubelet's `..data` / `..<timestamp>` entries. Reads and opens are not.
fn is_relevant(event: &Event, file_name: &OsString) -> bool {
    let read_only = matches!(
        event.kind,
        EventKind::Access(AccessKind::Open(_) | AccessKind::Read | AccessKind::Close(AccessMode::Read))
    );
    !read_only
        && event.paths.iter().any(|p| match p.file_name() {
            Some(name) => name == file_name || name.to_string_lossy().starts_with(".."),
            None => true,
        })
}

/// Waits until no event has come for `quiet`, or `4 × quiet` in all.
async fn debounce(events: &mut mpsc::Receiver<()>, quiet: Duration) {
    let give_up = Instant::now() + quiet * 4;
    while Instant::now() < give_up {
        match timeout(quiet, events.recv()).await {
            Ok(Some(())) => continue,
            Ok(None) | Err(_) => return,
        }
    }
}

/// The identity of a directory, to notice when it is replaced.
type DirId = (u64, u64);

fn dir_id(dir: &Path) -> Option<DirId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// (Re)arms the watch when the directory is not the one watched; returns
/// the identity now watched.
fn arm(watcher: Option<&mut RecommendedWatcher>, dir: &Path, armed: Option<DirId>) -> Option<DirId> {
    let current = dir_id(dir);
    let Some(watcher) = watcher else { return current };
    if current == armed {
        return armed;
    }
    let _ = watcher.unwatch(dir);
    if current.is_none() {
        tracing::warn!(dir = %dir.display(), "policy directory is missing; will watch it again when it returns");
        return None;
    }
    match watcher.watch(dir, RecursiveMode::NonRecursive) {
        Ok(()) => current,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot watch policy directory: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RenameMode};

    fn event(kind: EventKind, paths: &[&str]) -> Event {
        Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        }
    }

    #[test]
    fn relevant_events_are_the_file_and_kubelet_entries() {
        let name = OsString::from("retry-policy.yaml");
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert!(is_relevant(
            &event(rename, &["/c/..data_tmp", "/c/..data"]),
            &name
        ));
        assert!(is_relevant(
            &event(rename, &["/c/.x.swp", "/c/retry-policy.yaml"]),
            &name
        ));
        let write = EventKind::Modify(ModifyKind::Any);
        assert!(is_relevant(&event(write, &["/c/retry-policy.yaml"]), &name));
        assert!(!is_relevant(&event(write, &["/c/other.yaml"]), &name));
        assert!(!is_relevant(
            &event(EventKind::Create(CreateKind::File), &["/c/4913"]),
            &name
        ));
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(!is_relevant(&event(read, &["/c/retry-policy.yaml"]), &name));
    }

    #[test]
    fn bare_file_names_watch_the_working_directory() {
        assert_eq!(directory_of(Path::new("policy.yaml")), PathBuf::from("."));
        assert_eq!(
            directory_of(Path::new("/etc/sg/policy.yaml")),
            PathBuf::from("/etc/sg")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn debounce_waits_out_a_burst_but_not_forever() {
        let (tx, mut rx) = mpsc::channel(1);
        let start = Instant::now();
        let sender = tokio::spawn(async move {
            for _ in 0..100 {
                let _ = tx.send(()).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        debounce(&mut rx, Duration::from_millis(50)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(200), "capped at 4 × quiet");
        sender.abort();
        let (_tx, mut quiet_rx) = mpsc::channel::<()>(1);
        let start = Instant::now();
        debounce(&mut quiet_rx, Duration::from_millis(50)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(50));
    }
}
