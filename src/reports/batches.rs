//! Report batches already counted, so that a batch sent again (its `202`
//! was lost, a timeout fired after the daemon had counted it) is not counted
//! twice.
//!
//! A client sends one batch at a time and sends the same batch again until
//! it is answered, so the last few numbers of each instance are all there
//! is to remember. Memory is bounded: at most `max_instances` instances,
//! each forgotten once it has sent nothing for `window`.

use std::sync::Mutex;
use std::time::Duration;

use foldhash::HashMap;
use tokio::time::Instant;

use crate::pace_store::PaceStore;

/// Batch numbers remembered per instance.
pub const REMEMBERED: usize = 8;

/// The batches counted recently, by instance.
pub struct BatchLog {
    window: Duration,
    max_instances: usize,
    recent: Mutex<HashMap<String, Recent>>,
}

/// One instance's last batch numbers (a ring) and when it last sent one.
#[derive(Debug, Clone, Copy)]
struct Recent {
    sequences: [u64; REMEMBERED],
    filled: usize,
    seen: Instant,
}

/// Whether a batch is to be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// Not seen within the window: count it.
    New,
    /// Counted before: count nothing.
    Repeat,
    /// The log is full of live instances: count it, unremembered.
    Unremembered,
}

impl BatchLog {
    /// A log that forgets an instance `window` after its last batch and
    /// remembers at most `max_instances` instances.
    pub fn new(window: Duration, max_instances: usize) -> Self {
        Self {
            window,
            max_instances,
            recent: Mutex::default(),
        }
    }

    /// Whether batch `sequence` of `instance`, received at `now`, was
    /// counted before: by this replica, or, with a shared `store`, by any
    /// replica. A store that does not answer leaves this replica's word
    /// standing.
    pub async fn counted_before(
        &self,
        instance: &str,
        sequence: u64,
        store: Option<&PaceStore>,
        now: Instant,
    ) -> bool {
        if self.record(instance, sequence, now) == Batch::Repeat {
            return true;
        }
        let Some(store) = store else {
            return false;
        };
        match store
            .first_count(instance, sequence, self.window, REMEMBERED)
            .await
        {
            Ok(first) => !first,
            Err(error) => {
                tracing::debug!("{error}; batch {sequence} of {instance:?} checked by this replica alone");
                false
            }
        }
    }

    /// Records batch `sequence` of `instance`, received at `now`.
    pub fn record(&self, instance: &str, sequence: u64, now: Instant) -> Batch {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = recent.get_mut(instance) {
            if now.saturating_duration_since(known.seen) < self.window {
                if known.sequences[..known.filled.min(REMEMBERED)].contains(&sequence) {
                    return Batch::Repeat;
                }
            } else {
                known.filled = 0;
            }
            known.sequences[known.filled % REMEMBERED] = sequence;
            known.filled += 1;
            known.seen = now;
            return Batch::New;
        }
        if recent.len() >= self.max_instances {
            recent.retain(|_, r| now.saturating_duration_since(r.seen) < self.window);
            if recent.len() >= self.max_instances {
                return Batch::Unremembered;
            }
        }
        let mut sequences = [0; REMEMBERED];
        sequences[0] = sequence;
        recent.insert(
            instance.to_string(),
            Recent {
                sequences,
                filled: 1,
                seen: now,
            },
        );
        Batch::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_sent_again_is_a_repeat_within_the_window_only() {
        let log = BatchLog::new(Duration::from_secs(600), 10);
        let t0 = Instant::now();
        assert_eq!(log.record("pod-a", 41, t0), Batch::New);
        assert_eq!(log.record("pod-a", 41, t0), Batch::Repeat);
        assert_eq!(
            log.record("pod-b", 41, t0),
            Batch::New,
            "numbers are per instance"
        );
        assert_eq!(log.record("pod-a", 42, t0), Batch::New);
        assert_eq!(log.record("pod-a", 41, t0), Batch::Repeat, "still remembered");
        let later = t0 + Duration::from_secs(601);
        assert_eq!(
            log.record("pod-a", 42, later),
            Batch::New,
            "forgotten after the window"
        );
    }

    #[test]
    fn an_instance_remembers_its_last_numbers_only() {
        let log = BatchLog::new(Duration::from_secs(600), 10);
        let t0 = Instant::now();
        for n in 0..20 {
            assert_eq!(log.record("pod", n, t0), Batch::New);
        }
        assert_eq!(log.record("pod", 19, t0), Batch::Repeat);
        assert_eq!(log.record("pod", 12, t0), Batch::Repeat);
        assert_eq!(
            log.record("pod", 11, t0),
            Batch::New,
            "past the last {REMEMBERED}"
        );
    }

    #[test]
    fn the_log_is_bounded_and_makes_room_from_expired_instances() {
        let log = BatchLog::new(Duration::from_secs(60), 2);
        let t0 = Instant::now();
        assert_eq!(log.record("a", 1, t0), Batch::New);
        assert_eq!(log.record("b", 1, t0), Batch::New);
        assert_eq!(log.record("c", 1, t0), Batch::Unremembered);
        assert_eq!(log.record("c", 1, t0), Batch::Unremembered, "so never a repeat");
        let later = t0 + Duration::from_secs(61);
        assert_eq!(log.record("c", 1, later), Batch::New, "a and b expired");
        assert_eq!(log.record("c", 1, later), Batch::Repeat);
    }
}
