//! A paced dependency's exchange with the store (`exchange.lua`): this
//! replica's contribution in, the other replicas' demand, the published
//! rate and (to the owner) everyone's outcomes out; the owner's rate
//! published (`publish.lua`) and pushed to every replica.

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use stormguard_core::fleet::handover::Handover;
use stormguard_core::fleet::replicas::{Contribution, Demand, Outcomes, Published, Shared, Tallies};
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
        let demand = mine.demand;
        let want = finite(demand.want);
        let classes = demand.classes.unwrap_or([0.0, want, 0.0]).map(finite);
        let classes = format!("{} {} {}", classes[0], classes[1], classes[2]);
        let mut invocation = self.exchange.prepare_invoke();
        invocation
            .key(&keys.tallies)
            .key(&keys.wants)
            .key(&keys.owner)
            .key(&keys.rate)
            .key(&keys.classes)
            .arg(&self.replica)
            .arg(LEASE.as_millis() as u64)
            .arg(outcomes.sent)
            .arg(outcomes.accepted)
            .arg(outcomes.overloaded)
            .arg(outcomes.timed_out)
            .arg(age)
            .arg(want.to_string())
            .arg(demand.members)
            .arg(classes);
        let mut connection = self.connection().await?;
        let answer: Answer = self.bounded(invocation.invoke_async(&mut connection)).await?;
        self.read(service, answer)
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
            .arg(&keys.channel)
            .arg(rate.handover.map_or_else(String::new, |handover| {
                serde_json::to_string(&handover).expect("a handover is plain numbers")
            }));
        let mut connection = self.connection().await?;
        let published: i64 = self.bounded(invocation.invoke_async(&mut connection)).await?;
        Ok(published == 1)
    }

    /// Gives up `service`'s pace if this replica owns it, as it shuts down:
    /// another replica takes it at its next exchange, with what this one's
    /// law learned, instead of a lease later. Whether it owned it.
    pub async fn release(&self, service: &str) -> Result<bool, StoreError> {
        self.counted(self.release_uncounted(service)).await
    }

    async fn release_uncounted(&self, service: &str) -> Result<bool, StoreError> {
        let keys = Keys::of(service);
        let mut invocation = self.release.prepare_invoke();
        invocation.key(&keys.owner).arg(&self.replica);
        let mut connection = self.connection().await?;
        let released: i64 = self.bounded(invocation.invoke_async(&mut connection)).await?;
        Ok(released == 1)
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
                // A replica that does not own the pace divides its rate;
                // only the next owner takes up what the last one learned.
                let (rate, _, _) = parse_rate(&payload, 0)?;
                Some((service.to_string(), rate))
            })())
        }))
    }

    /// The handover `text` a last owner left for `service`, if this replica
    /// can take it up; if not, it says why in the log and the count, and
    /// carries on from the published rate alone.
    fn handover(&self, service: &str, text: &str) -> Option<Handover> {
        let read = serde_json::from_str::<Handover>(text)
            .map_err(|error| ("unreadable", error.to_string()))
            .and_then(|handover| {
                handover.checked().map_err(|refused| {
                    let reason = match refused {
                        stormguard_core::fleet::handover::Refused::Version(_) => "version",
                        stormguard_core::fleet::handover::Refused::OutOfRange(_) => "out_of_range",
                    };
                    (reason, refused.to_string())
                })
            });
        let mut refusing = self
            .refusing_handovers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match read {
            Ok(handover) => {
                refusing.remove(service);
                Some(handover)
            }
            Err((reason, why)) => {
                if refusing.insert(service.to_string()) {
                    tracing::warn!(
                        "{service}'s pace in the store at {} carries a handover this replica cannot take up ({why}): it carries on from the published rate alone, and says nothing more until one can be taken up",
                        self.at
                    );
                }
                self.metrics.handovers_refused.with_label_values(&[reason]).inc();
                None
            }
        }
    }

    fn read(&self, service: &str, (owner, taken, others, rate, now): Answer) -> Result<Shared, StoreError> {
        let malformed = |what: String| self.malformed(what);
        let now: u64 = now.parse().map_err(|_| malformed(format!("time {now:?}")))?;
        let others = others
            .iter()
            .map(|entry| parse_want(entry).ok_or_else(|| malformed(format!("demand {entry:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let published = rate
            .map(|text| {
                let (rate, age, handover) =
                    parse_rate(&text, now).ok_or_else(|| malformed(format!("rate {text:?}")))?;
                let handover = handover.and_then(|text| self.handover(service, text));
                Ok((Published { handover, ..rate }, age))
            })
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
    classes: String,
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
            classes: key("classes"),
            channel: key("published"),
        }
    }
}

/// `"want members [critical default sheddable]"`, as the exchange script
/// answers each replica's demand (without its classes from a replica that
/// does not write them).
fn parse_want(entry: &str) -> Option<Demand> {
    let fields: Vec<&str> = entry.split(' ').collect();
    let number = |text: &str| text.parse::<f64>().ok().map(finite);
    let classes = match fields[..] {
        [_, _] => None,
        [_, _, critical, default, sheddable] => {
            Some([number(critical)?, number(default)?, number(sheddable)?])
        }
        _ => return None,
    };
    Some(Demand {
        want: number(fields[0])?,
        members: fields[1].parse().ok()?,
        classes,
    })
}

/// A want as the store keeps it: finite, and at least zero.
fn finite(want: f64) -> f64 {
    if want.is_finite() {
        want.max(0.0)
    } else {
        0.0
    }
}

/// `"rate probing at_ms [handover]"`, as the publish script writes it,
/// seen at `now` ms: the rate (without its handover), its age, and the
/// handover's text if there is one.
fn parse_rate(text: &str, now: u64) -> Option<(Published, Duration, Option<&str>)> {
    let mut fields = text.splitn(4, ' ');
    let rate: f64 = fields.next()?.parse().ok()?;
    let probing = match fields.next()? {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    let at: u64 = fields.next()?.parse().ok()?;
    let handover = fields.next();
    (rate.is_finite() && rate > 0.0).then(|| {
        (
            Published {
                rate,
                probing,
                handover: None,
            },
            Duration::from_millis(now.saturating_sub(at)),
            handover,
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
        for key in [
            &keys.tallies,
            &keys.wants,
            &keys.owner,
            &keys.rate,
            &keys.classes,
            &keys.channel,
        ] {
            assert!(key.starts_with("stormguard:pace:{payment-service}:"), "{key}");
        }
    }

    #[test]
    fn the_scripts_answers_are_read_and_anything_else_refused() {
        let plain = |want, members| Demand {
            want,
            members,
            classes: None,
        };
        assert_eq!(parse_want("12.5 3"), Some(plain(12.5, 3)));
        assert_eq!(parse_want("NaN 3"), Some(plain(0.0, 3)));
        assert_eq!(
            parse_want("12.5 3 2.5 10 0"),
            Some(Demand {
                classes: Some([2.5, 10.0, 0.0]),
                ..plain(12.5, 3)
            })
        );
        assert_eq!(parse_want("12.5"), None);
        assert_eq!(parse_want("12.5 -1"), None);
        assert_eq!(parse_want("12.5 3 2.5 10"), None, "a class missing");
        assert_eq!(parse_want("12.5 3 2.5 x 0"), None);
        let (rate, age, handover) = parse_rate("180.25 0 1000", 1250).expect("a rate");
        assert_eq!(
            rate,
            Published {
                rate: 180.25,
                probing: false,
                handover: None,
            }
        );
        assert_eq!((age, handover), (Duration::from_millis(250), None));
        assert_eq!(
            parse_rate("4 1 1000", 1000).map(|(r, _, _)| r.probing),
            Some(true)
        );
        assert_eq!(
            parse_rate("4 0 1000 {\"version\":1}", 1000).and_then(|(_, _, h)| h),
            Some("{\"version\":1}"),
            "a handover rides after the time, read apart"
        );
        for bad in ["0 0 1000", "inf 0 1000", "4 2 1000", "4 0"] {
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
