//! One fleet breaker episode per dependency, shared by the replicas: each
//! reads it, merges its share in (the very merge the simulator runs) and
//! writes it back under compare-and-set, so that the store needs no logic
//! of its own beyond the version check.

use std::time::Duration;

use stormguard_core::fleet::breaker::episode::{Episode, EpisodeAnswer, Heard, HeardFrom, Share};
use stormguard_core::fleet::IDLE;

use super::{PaceStore, StoreError};

/// Writes that lose to another replica's before this one gives up until
/// its next turn (its share goes with that one).
const TRIES: usize = 4;

/// The script's answer: written, version, episode, now, and each
/// replica's word of itself (name, word, ...).
type Answer = (i64, String, String, String, Vec<String>);

/// The episode as the store holds it.
struct Read {
    written: bool,
    version: String,
    text: String,
    at: u64,
    heard: HeardFrom,
    unreadable: Vec<String>,
}

impl PaceStore {
    /// Merges `share` into `service`'s episode: the episode as written,
    /// the slots granted to this replica, and the store's time. A share
    /// under other rules than the episode's, which another replica still
    /// applies, is refused and written nowhere (it does not keep the
    /// episode alive either).
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
        let mut read = self.swap(&key, None, keep).await?;
        for _ in 0..TRIES {
            let began = std::time::Instant::now();
            let mut episode = self.episode(&read.text)?;
            let now = read.at.saturating_add(began.elapsed().as_millis() as u64);
            let granted = episode
                .merge(&self.replica, share, &read.heard, now)
                .map_err(|refused| StoreError::OtherRules {
                    at: self.address().to_string(),
                    service: service.to_owned(),
                    refused,
                })?;
            let merged = serde_json::to_string(&episode).expect("an episode is JSON");
            let word = serde_json::to_string(&Heard::of(share, now)).expect("a word is JSON");
            let stale: Vec<&str> = read
                .heard
                .iter()
                .filter(|&(name, them)| name != &self.replica && them.is_stale_at(now))
                .map(|(name, _)| name.as_str())
                .chain(read.unreadable.iter().map(String::as_str))
                .collect();
            let write = Write {
                version: &read.version,
                episode: &merged,
                word: &word,
                stale: &stale,
            };
            let next = self.swap(&key, Some(write), keep).await?;
            if next.written {
                return Ok(EpisodeAnswer {
                    episode,
                    granted,
                    at: now,
                });
            }
            read = next;
        }
        Err(StoreError::Contended {
            at: self.address().to_string(),
            tries: TRIES,
        })
    }

    /// Reads the episode, or (given a `write`) writes it if it is still at
    /// the version read.
    async fn swap(&self, key: &str, write: Option<Write<'_>>, keep: Duration) -> Result<Read, StoreError> {
        let mut invocation = self.breaker.prepare_invoke();
        invocation.key(key);
        match &write {
            Some(write) => invocation
                .arg(write.version)
                .arg(write.episode)
                .arg(keep.as_millis() as u64)
                .arg(&self.replica)
                .arg(write.word)
                .arg(write.stale),
            None => invocation.arg("").arg("").arg(0).arg(&self.replica).arg(""),
        };
        let mut connection = self.connection().await?;
        let (written, version, text, now, words): Answer =
            self.bounded(invocation.invoke_async(&mut connection)).await?;
        let at = now.parse().map_err(|_| self.malformed(format!("time {now:?}")))?;
        let (heard, unreadable) = heard_from(&words);
        Ok(Read {
            written: written == 1,
            version,
            text,
            at,
            heard,
            unreadable,
        })
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

/// A merged episode to write back, at the version it was read at.
struct Write<'a> {
    version: &'a str,
    episode: &'a str,
    /// This replica's word of itself.
    word: &'a str,
    /// Replicas whose words are stale.
    stale: &'a [&'a str],
}

/// The replicas' words as the script lists them (name, word, ...), and
/// the names whose words this daemon cannot read (another version's,
/// torn): those count as unheard, and are forgotten at the next write.
fn heard_from(words: &[String]) -> (HeardFrom, Vec<String>) {
    let mut heard = HeardFrom::new();
    let mut unreadable = Vec::new();
    for pair in words.chunks_exact(2) {
        match serde_json::from_str::<Heard>(&pair[1]) {
            Ok(word) => {
                heard.insert(pair[0].clone(), word);
            }
            Err(_) => unreadable.push(pair[0].clone()),
        }
    }
    (heard, unreadable)
}
