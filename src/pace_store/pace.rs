//! A paced dependency's exchange with the store (`exchange.lua`): this
//! replica's contribution in, the other replicas' demand, the published
//! rate and (to the owner) everyone's outcomes out; the owner's rate
//! published (`publish.lua`) and pushed to every replica.

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use stormguard_core::fleet::replicas::{Contribution, Outcomes, Published, Shared, Tallies};
use stormguard_core::fleet::LEASE;

use super::{PaceStore, StoreError};

/// The script's answer: owner, taken, others, rate, now.
type Answer = (i64, Vec<String>, Vec<String>, Option<String>, String);

impl PaceStore {
    /// Adds this replica's contribution `mine` to the pace of `service`,
    /// and the store's answer.
    pub async fn exchange(&self, service: &str, mine: &Contribution) -> Result<Shared, StoreError> {
        self.counted(self.exchange_uncounted(service, mine)).await
    }

    async fn exchange_uncounted(&self, service: &str, mine: &Contribution) -> Result<Shared, StoreError> {
        let keys = Keys::of(service);
        let tallies = mine.tallies;
        let outcomes = tallies.outcomes;
        let age = tallies
            .overloaded_since
            .map_or(-1, |age| i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        let want = if mine.want.is_finite() {
            mine.want.max(0.0)
        } else {
            0.0
        };
        let mut invocation = self.exchange.prepare_invoke();
        invocation
            .key(&keys.tallies)
            .key(&keys.wants)
            .key(&keys.owner)
            .key(&keys.rate)
            .arg(&self.replica)
            .arg(LEASE.as_millis() as u64)
            .arg(outcomes.sent)
            .arg(outcomes.accepted)
            .arg(outcomes.overloaded)
            .arg(outcomes.timed_out)
            .arg(age)
            .arg(want.to_string())
            .arg(mine.members);
        let mut connection = self.connection().await?;
        let answer: Answer = self.bounded(invocation.invoke_async(&mut connection)).await?;
        self.read(answer)
    }

    /// Publishes `rate` as the fleet's rate for `service`: whether it was,
    /// that is whether this replica still owns the pace.
    pub async fn publish(&self, service: &str, rate: Published) -> Result<bool, StoreError> {
        self.counted(self.publish_uncounted(service, rate)).await
    }

    async fn publish_uncounted(&self, service: &str, rate: Published) -> Result<bool, StoreError> {
        let keys = Keys::of(service);
        let mut invocation = self.publish.prepare_invoke();
        invocation
            .key(&keys.owner)
            .key(&keys.rate)
            .arg(&self.replica)
            .arg(LEASE.as_millis() as u64)
            .arg(rate.rate.to_string())
            .arg(u8::from(rate.probing))
            .arg(&keys.channel);
        let mut connection = self.connection().await?;
        let published: i64 = self.bounded(invocation.invoke_async(&mut connection)).await?;
        Ok(published == 1)
    }

    /// The rates owners publish, as `(service, rate)`, as they arrive.
    /// Messages this daemon cannot read are passed over.
    pub async fn subscribe(&self) -> Result<impl Stream<Item = (String, Published)>, StoreError> {
        self.counted(self.subscribe_uncounted()).await
    }

    async fn subscribe_uncounted(&self) -> Result<impl Stream<Item = (String, Published)>, StoreError> {
        let mut pubsub = self.bounded(self.client.get_async_pubsub()).await?;
        self.bounded(pubsub.psubscribe("stormguard:pace:{*}:published"))
            .await?;
        Ok(pubsub.into_on_message().filter_map(|message| {
            std::future::ready((|| {
                let channel = message.get_channel_name();
                let service = channel
                    .strip_prefix("stormguard:pace:{")?
                    .strip_suffix("}:published")?;
                let payload: String = message.get_payload().ok()?;
                let (rate, _) = parse_rate(&payload, 0)?;
                Some((service.to_string(), rate))
            })())
        }))
    }

    fn read(&self, (owner, taken, others, rate, now): Answer) -> Result<Shared, StoreError> {
        let malformed = |what: String| self.malformed(what);
        let now: u64 = now.parse().map_err(|_| malformed(format!("time {now:?}")))?;
        let others = others
            .iter()
            .map(|entry| parse_want(entry).ok_or_else(|| malformed(format!("demand {entry:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let published = rate
            .map(|text| parse_rate(&text, now).ok_or_else(|| malformed(format!("rate {text:?}"))))
            .transpose()?;
        let taken = (owner == 1)
            .then(|| parse_taken(&taken).ok_or_else(|| malformed(format!("tallies {taken:?}"))))
            .transpose()?;
        Ok(Shared {
            published,
            others,
            taken,
        })
    }
}

/// The keys of one dependency's pace, its name the hash tag.
struct Keys {
    tallies: String,
    wants: String,
    owner: String,
    rate: String,
    channel: String,
}

impl Keys {
    fn of(service: &str) -> Self {
        let key = |what: &str| format!("stormguard:pace:{{{service}}}:{what}");
        Self {
            tallies: key("tallies"),
            wants: key("wants"),
            owner: key("owner"),
            rate: key("rate"),
            channel: key("published"),
        }
    }
}

/// `"want members"`, as the exchange script answers each replica's demand.
fn parse_want(entry: &str) -> Option<(f64, u32)> {
    let (want, members) = entry.split_once(' ')?;
    let want: f64 = want.parse().ok()?;
    Some((
        if want.is_finite() { want.max(0.0) } else { 0.0 },
        members.parse().ok()?,
    ))
}

/// `"rate probing at_ms"`, as the publish script writes it, seen at `now` ms.
fn parse_rate(text: &str, now: u64) -> Option<(Published, Duration)> {
    let mut fields = text.split(' ');
    let rate: f64 = fields.next()?.parse().ok()?;
    let probing = match fields.next()? {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    let at: u64 = fields.next()?.parse().ok()?;
    (rate.is_finite() && rate > 0.0 && fields.next().is_none()).then(|| {
        (
            Published { rate, probing },
            Duration::from_millis(now.saturating_sub(at)),
        )
    })
}

/// The tallies hash as the exchange script hands it to the owner: field,
/// value, field, value; `overloaded_at` already turned into an age in ms.
fn parse_taken(flat: &[String]) -> Option<Tallies> {
    let mut tallies = Tallies {
        outcomes: Outcomes::default(),
        overloaded_since: None,
    };
    for pair in flat.chunks(2) {
        let [field, value] = pair else { return None };
        let value: u64 = value.parse().ok()?;
        match field.as_str() {
            "sent" => tallies.outcomes.sent = value,
            "accepted" => tallies.outcomes.accepted = value,
            "overloaded" => tallies.outcomes.overloaded = value,
            "timed_out" => tallies.outcomes.timed_out = value,
            "overloaded_at" => tallies.overloaded_since = Some(Duration::from_millis(value)),
            _ => return None,
        }
    }
    Some(tallies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependencys_keys_share_its_name_as_the_hash_tag() {
        let keys = Keys::of("payment-service");
        for key in [&keys.tallies, &keys.wants, &keys.owner, &keys.rate, &keys.channel] {
            assert!(key.starts_with("stormguard:pace:{payment-service}:"), "{key}");
        }
    }

    #[test]
    fn the_scripts_answers_are_read_and_anything_else_refused() {
        assert_eq!(parse_want("12.5 3"), Some((12.5, 3)));
        assert_eq!(parse_want("NaN 3"), Some((0.0, 3)));
        assert_eq!(parse_want("12.5"), None);
        assert_eq!(parse_want("12.5 -1"), None);
        let (rate, age) = parse_rate("180.25 0 1000", 1250).expect("a rate");
        assert_eq!(
            rate,
            Published {
                rate: 180.25,
                probing: false
            }
        );
        assert_eq!(age, Duration::from_millis(250));
        assert_eq!(parse_rate("4 1 1000", 1000).map(|(r, _)| r.probing), Some(true));
        for bad in ["0 0 1000", "inf 0 1000", "4 2 1000", "4 0", "4 0 1000 extra"] {
            assert_eq!(parse_rate(bad, 2000), None, "{bad}");
        }
        let flat = |pairs: &[(&str, &str)]| -> Vec<String> {
            pairs
                .iter()
                .flat_map(|(f, v)| [f.to_string(), v.to_string()])
                .collect()
        };
        let taken = parse_taken(&flat(&[
            ("sent", "9"),
            ("accepted", "7"),
            ("overloaded", "2"),
            ("overloaded_at", "40"),
        ]));
        assert_eq!(
            taken,
            Some(Tallies {
                outcomes: Outcomes {
                    sent: 9,
                    accepted: 7,
                    overloaded: 2,
                    timed_out: 0
                },
                overloaded_since: Some(Duration::from_millis(40)),
            })
        );
        assert_eq!(
            parse_taken(&[]),
            Some(Tallies::default()),
            "nothing contributed since"
        );
        assert_eq!(parse_taken(&flat(&[("sent", "-1")])), None);
        assert_eq!(parse_taken(&flat(&[("bogus", "1")])), None);
        assert_eq!(parse_taken(&["sent".to_string()]), None);
    }
}
