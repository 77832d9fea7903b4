//! One fleet breaker episode per dependency, shared by the replicas: each
//! reads it, merges its share in (the very merge the simulator runs) and
//! writes it back under compare-and-set, so that the store needs no logic
//! of its own beyond the version check.

use std::time::Duration;

use stormguard_core::fleet::breaker::episode::{Episode, EpisodeAnswer, Share};
use stormguard_core::fleet::IDLE;

use super::{PaceStore, StoreError};

/// Writes that lose to another replica's before this one gives up until
/// its next turn (its share goes with that one).
const TRIES: usize = 4;

/// The script's answer: written, version, episode, now.
type Answer = (i64, String, String, String);

impl PaceStore {
    /// Merges `share` into `service`'s episode: the episode as written,
    /// the slots granted to this replica, and the store's time.
    pub async fn share_breaker(&self, service: &str, share: &Share) -> Result<EpisodeAnswer, StoreError> {
        self.counted(self.share_breaker_uncounted(service, share)).await
    }

    async fn share_breaker_uncounted(
        &self,
        service: &str,
        share: &Share,
    ) -> Result<EpisodeAnswer, StoreError> {
        let key = format!("stormguard:breaker:{{{service}}}:episode");
        let keep = Duration::from_millis(share.rules.open_timeout_ms) + IDLE;
        let (_, mut version, mut text, mut read_at) = self.swap(&key, "", "", keep).await?;
        for _ in 0..TRIES {
            let began = std::time::Instant::now();
            let mut episode = self.episode(&text)?;
            let now = read_at.saturating_add(began.elapsed().as_millis() as u64);
            let granted = episode.merge(share, now);
            let merged = serde_json::to_string(&episode).expect("an episode is JSON");
            let (written, now_version, now_text, at) = self.swap(&key, &version, &merged, keep).await?;
            if written {
                return Ok(EpisodeAnswer {
                    episode,
                    granted,
                    at: now,
                });
            }
            (version, text, read_at) = (now_version, now_text, at);
        }
        Err(StoreError::Contended {
            at: self.address().to_string(),
            tries: TRIES,
        })
    }

    async fn swap(
        &self,
        key: &str,
        version: &str,
        episode: &str,
        keep: Duration,
    ) -> Result<(bool, String, String, u64), StoreError> {
        let mut invocation = self.breaker.prepare_invoke();
        invocation
            .key(key)
            .arg(version)
            .arg(episode)
            .arg(keep.as_millis() as u64);
        let mut connection = self.connection().await?;
        let (written, version, text, now): Answer =
            self.bounded(invocation.invoke_async(&mut connection)).await?;
        let now = now.parse().map_err(|_| self.malformed(format!("time {now:?}")))?;
        Ok((written == 1, version, text, now))
    }

    /// The episode as stored: none yet if empty.
    fn episode(&self, text: &str) -> Result<Episode, StoreError> {
        if text.is_empty() {
            return Ok(Episode::default());
        }
        serde_json::from_str(text)
            .map_err(|error| self.malformed(format!("breaker episode {text:?}: {error}")))
    }
}
