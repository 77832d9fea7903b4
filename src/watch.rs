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

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, timeout, Instant, MissedTickBehavior};

use crate::reload::{Reloader, Trigger};

/// How the watcher paces reloads.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    /// Quiet time after the last event before reloading; a burst of events is
    /// waited out for at most four times this.
    pub debounce: Duration,
    /// Interval of the periodic re-check, which also re-arms the watch.
    pub recheck: Duration,
}

/// How long a file being written in place may go without being closed before
/// it is read anyway (a writer that keeps it open, a symlink just created).
const WRITE_SETTLE: Duration = Duration::from_secs(1);

/// Whether `path` was modified less than [`WRITE_SETTLE`] ago; an unreadable
/// path is not (the reload reports why it cannot be read).
fn recently_written(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .is_some_and(|age| age < WRITE_SETTLE)
}

/// What a file event asks of the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relevance {
    /// Nothing the policy path reads changed.
    Ignore,
    /// The path may read differently now: reload after the debounce.
    Reload,
    /// The file is being written in place: reload when the writer closes it,
    /// so that a half-written file (often valid YAML) is never served.
    AwaitClose,
}

/// Signals from the watcher thread, coalesced: many events, one wake-up.
#[derive(Default)]
struct Signals {
    reload: Notify,
    writing: Notify,
}

/// A watch on a policy file's directory, armed before the file is first
/// loaded so that no change after the load can go unseen.
pub struct FileWatch {
    path: PathBuf,
    dir: PathBuf,
    watcher: Option<RecommendedWatcher>,
    armed: bool,
    signals: Arc<Signals>,
}

impl FileWatch {
    /// Starts watching the directory of `path`. If file events are not
    /// available, the periodic re-check is all there is, and a warning says so.
    pub fn arm(path: &Path) -> Self {
        let dir = directory_of(path);
        let signals = Arc::new(Signals::default());
        let watcher = match new_watcher(path, signals.clone()) {
            Ok(watcher) => Some(watcher),
            Err(e) => {
                tracing::warn!("cannot watch for file events ({e}); relying on the periodic re-check");
                None
            }
        };
        let mut this = Self {
            path: path.to_path_buf(),
            dir,
            watcher,
            armed: true,
            signals,
        };
        this.rearm();
        this
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
        let mut settle: Option<Instant> = None;
        loop {
            let settled = async {
                match settle {
                    Some(deadline) => sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.signals.reload.notified() => {
                    debounce(&self.signals.reload, config.debounce).await;
                    settle = None;
                    reloader.reload(Trigger::Watch).await;
                }
                () = self.signals.writing.notified() => {
                    settle.get_or_insert(Instant::now() + WRITE_SETTLE);
                }
                () = settled => {
                    settle = None;
                    reloader.reload(Trigger::Watch).await;
                }
                _ = recheck.tick() => {
                    self.rearm();
                    // A file being written in place is not read half-way:
                    // not while the watch waits for its writer to close it,
                    // nor (without events) while it changed under a settle ago.
                    if settle.is_none() && !recently_written(&self.path) {
                        reloader.reload(Trigger::Recheck).await;
                    }
                }
                () = crate::shutdown::shutting_down(&mut shutdown) => return,
            }
        }
    }

    /// Watches the directory afresh. Cheap, and robust where checking would
    /// not be: a directory removed and re-created may even reuse its inode.
    fn rearm(&mut self) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        let _ = watcher.unwatch(&self.dir);
        match watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
            Ok(()) if !self.armed => {
                tracing::info!(dir = %self.dir.display(), "watching the policy directory again");
                self.armed = true;
            }
            Ok(()) => {}
            Err(e) if self.armed => {
                tracing::warn!(dir = %self.dir.display(), "cannot watch the policy directory ({e}); will retry");
                self.armed = false;
            }
            Err(_) => {}
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

fn new_watcher(path: &Path, signals: Arc<Signals>) -> notify::Result<RecommendedWatcher> {
    let file_name = path.file_name().map(OsString::from).unwrap_or_default();
    notify::recommended_watcher(move |event: notify::Result<Event>| match event {
        Ok(event) => match classify(&event, &file_name) {
            Relevance::Reload => signals.reload.notify_one(),
            Relevance::AwaitClose => signals.writing.notify_one(),
            Relevance::Ignore => {}
        },
        Err(e) => {
            tracing::warn!("file watch error: {e}");
            signals.reload.notify_one();
        }
    })
}

/// What `event` means for the file named `file_name`. Kubelet's `..data` and
/// `..<timestamp>` entries count as the file: they are what its symlink reads.
fn classify(event: &Event, file_name: &OsString) -> Relevance {
    if event.need_rescan() || event.paths.is_empty() {
        return Relevance::Reload; // the kernel's queue overflowed: anything may have changed
    }
    let concerns_file = event.paths.iter().any(|p| match p.file_name() {
        Some(name) => name == file_name || name.to_string_lossy().starts_with(".."),
        None => true,
    });
    if !concerns_file {
        return Relevance::Ignore;
    }
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Relevance::Reload,
        EventKind::Access(_) => Relevance::Ignore,
        EventKind::Create(CreateKind::File) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
            Relevance::AwaitClose
        }
        _ => Relevance::Reload,
    }
}

/// Waits until no signal has come for `quiet`, or `4 × quiet` in all.
async fn debounce(signal: &Notify, quiet: Duration) {
    let give_up = Instant::now() + quiet * 4;
    while Instant::now() < give_up {
        if timeout(quiet, signal.notified()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{DataChange, Flag, RenameMode};

    fn event(kind: EventKind, paths: &[&str]) -> Event {
        Event {
            kind,
            paths: paths.iter().map(PathBuf::from).collect(),
            attrs: Default::default(),
        }
    }

    #[test]
    fn events_are_classified_by_what_they_mean_for_the_file() {
        let name = OsString::from("retry-policy.yaml");
        let class = |kind, paths: &[&str]| classify(&event(kind, paths), &name);
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            class(rename, &["/c/..data_tmp", "/c/..data"]),
            Relevance::Reload,
            "kubelet swap"
        );
        assert_eq!(
            class(rename, &["/c/.x.swp", "/c/retry-policy.yaml"]),
            Relevance::Reload,
            "rename-over"
        );
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert_eq!(
            class(write, &["/c/retry-policy.yaml"]),
            Relevance::AwaitClose,
            "write in progress"
        );
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(
            class(closed, &["/c/retry-policy.yaml"]),
            Relevance::Reload,
            "writer done"
        );
        assert_eq!(class(write, &["/c/other.yaml"]), Relevance::Ignore);
        assert_eq!(
            class(EventKind::Create(CreateKind::File), &["/c/4913"]),
            Relevance::Ignore
        );
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert_eq!(class(read, &["/c/retry-policy.yaml"]), Relevance::Ignore);
        let mut overflow = event(EventKind::Other, &[]);
        overflow.attrs.set_flag(Flag::Rescan);
        assert_eq!(classify(&overflow, &name), Relevance::Reload, "queue overflow");
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
        let signal = Arc::new(Notify::new());
        let start = Instant::now();
        let sender = tokio::spawn({
            let signal = signal.clone();
            async move {
                for _ in 0..100 {
                    signal.notify_one();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        debounce(&signal, Duration::from_millis(50)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(200), "capped at 4 × quiet");
        sender.abort();
        let quiet = Notify::new();
        let start = Instant::now();
        debounce(&quiet, Duration::from_millis(50)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(50));
    }
}
