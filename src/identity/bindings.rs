//! Which service account speaks for which instance: the first verified
//! caller to name an instance owns it until the instance goes quiet, so a
//! workload with a valid token of its own still cannot report or ask for
//! pace under another workload's instance names.
//!
//! With replicas sharing a store, the store holds the fleet-wide bindings
//! and this table is each replica's cache of them: an instance is checked
//! against the store when this replica first sees it and again every
//! [`Bindings::confirm_every`], and the store's answer wins (see
//! `crate::pace_store::instances`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Identity;

/// Instances and their owners, bounded in number and time.
pub struct Bindings {
    ttl: Duration,
    max: usize,
    owners: Mutex<HashMap<String, Bound>>,
}

/// What this replica knows of one instance.
#[derive(Debug, Clone)]
struct Bound {
    /// Its owner; none if the store says nobody owns it.
    owner: Option<Identity>,
    /// When its owner last spoke for it (or the store said it was free).
    spoke: Instant,
    /// When the store last confirmed the owner, if it ever did.
    confirmed: Option<Instant>,
}

/// An instance named by someone who does not own it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("instance {instance:?} speaks as {owner}; {} may not speak for it", caller.as_ref().map_or("a caller without a token".to_string(), |c| c.to_string()))]
pub struct NotYours {
    /// The instance.
    pub instance: String,
    /// Who owns it.
    pub owner: Identity,
    /// Who tried.
    pub caller: Option<Identity>,
}

impl Bindings {
    /// An instance stays bound for `ttl` after its owner last spoke; at most `max` are bound.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max,
            owners: Mutex::default(),
        }
    }

    /// How long an instance stays bound after its owner last spoke.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often a replica checks an instance it knows against the store:
    /// a quarter of the TTL, so the store's binding is renewed well before
    /// it lapses while the owner keeps speaking to this replica only.
    pub fn confirm_every(&self) -> Duration {
        self.ttl / 4
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bound>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `caller` may speak for `instance` at `now`; a verified caller
    /// naming a free instance takes it. Past `max` bound instances, a new
    /// instance is served unbound rather than refused.
    pub fn speak(&self, instance: &str, caller: Option<&Identity>, now: Instant) -> Result<(), NotYours> {
        let mut owners = self.lock();
        if let Some(known) = owners.get_mut(instance) {
            if now.saturating_duration_since(known.spoke) < self.ttl {
                match &known.owner {
                    Some(owner) if Some(owner) != caller => {
                        return Err(NotYours {
                            instance: instance.to_string(),
                            owner: owner.clone(),
                            caller: caller.cloned(),
                        });
                    }
                    Some(_) => {
                        known.spoke = now;
                        return Ok(());
                    }
                    None if caller.is_none() => return Ok(()),
                    None => {}
                }
            }
            owners.remove(instance);
        }
        let Some(caller) = caller else { return Ok(()) };
        self.insert(&mut owners, instance, Some(caller.clone()), None, now);
        Ok(())
    }

    /// Whether `instance` is due a check against the store at `now`: never
    /// confirmed, or last confirmed [`Self::confirm_every`] ago or more.
    pub fn unconfirmed(&self, instance: &str, now: Instant) -> bool {
        self.lock()
            .get(instance)
            .and_then(|known| known.confirmed)
            .is_none_or(|confirmed| now.saturating_duration_since(confirmed) >= self.confirm_every())
    }

    /// Takes the store's word at `now` that `owner` owns `instance` (none:
    /// nobody does), over whatever this replica thought.
    pub fn confirmed(&self, instance: &str, owner: Option<Identity>, now: Instant) {
        let mut owners = self.lock();
        owners.remove(instance);
        self.insert(&mut owners, instance, owner, Some(now), now);
    }

    fn insert(
        &self,
        owners: &mut HashMap<String, Bound>,
        instance: &str,
        owner: Option<Identity>,
        confirmed: Option<Instant>,
        now: Instant,
    ) {
        if owners.len() >= self.max {
            let ttl = self.ttl;
            owners.retain(|_, known| now.saturating_duration_since(known.spoke) < ttl);
        }
        if owners.len() < self.max {
            let bound = Bound {
                owner,
                spoke: now,
                confirmed,
            };
            owners.insert(instance.to_string(), bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str) -> Identity {
        Identity {
            namespace: "shop".into(),
            service_account: name.into(),
        }
    }

    #[test]
    fn the_first_verified_caller_owns_an_instance_until_it_goes_quiet() {
        let bindings = Bindings::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        assert!(bindings.speak("pod-1", None, t0).is_ok(), "unbound: anyone");
        bindings.speak("pod-1", Some(&who("checkout")), t0).unwrap();
        let stolen = bindings.speak("pod-1", Some(&who("intruder")), t0).unwrap_err();
        assert_eq!(stolen.owner, who("checkout"));
        assert!(bindings.speak("pod-1", None, t0).is_err(), "nor without a token");
        let later = t0 + Duration::from_secs(59);
        bindings.speak("pod-1", Some(&who("checkout")), later).unwrap();
        assert!(
            bindings
                .speak("pod-1", Some(&who("intruder")), later + Duration::from_secs(30))
                .is_err(),
            "speaking renews it"
        );
        assert!(
            bindings
                .speak("pod-1", Some(&who("intruder")), later + Duration::from_secs(60))
                .is_ok(),
            "quiet: free again"
        );
    }

    #[test]
    fn past_its_bound_a_new_instance_is_served_unbound() {
        let bindings = Bindings::new(Duration::from_secs(60), 1);
        let t0 = Instant::now();
        bindings.speak("pod-1", Some(&who("a")), t0).unwrap();
        bindings.speak("pod-2", Some(&who("b")), t0).unwrap();
        assert!(bindings.speak("pod-2", Some(&who("c")), t0).is_ok());
        assert!(bindings.speak("pod-1", Some(&who("c")), t0).is_err());
    }

    #[test]
    fn the_stores_word_wins_and_is_asked_again_a_quarter_ttl_later() {
        let bindings = Bindings::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        bindings.speak("pod-1", Some(&who("checkout")), t0).unwrap();
        assert!(
            bindings.unconfirmed("pod-1", t0),
            "taken here, not yet in the store"
        );
        bindings.confirmed("pod-1", Some(who("payments")), t0);
        let refused = bindings.speak("pod-1", Some(&who("checkout")), t0).unwrap_err();
        assert_eq!(refused.owner, who("payments"), "the other replica's owner");
        assert!(!bindings.unconfirmed("pod-1", t0 + Duration::from_secs(14)));
        assert!(bindings.unconfirmed("pod-1", t0 + Duration::from_secs(15)));
        assert!(bindings.unconfirmed("pod-2", t0), "never seen");
    }

    #[test]
    fn an_instance_the_store_calls_free_is_free_here_too() {
        let bindings = Bindings::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        bindings.confirmed("pod-1", None, t0);
        assert!(!bindings.unconfirmed("pod-1", t0));
        bindings.speak("pod-1", None, t0).unwrap();
        bindings.speak("pod-1", Some(&who("checkout")), t0).unwrap();
        assert!(
            bindings.unconfirmed("pod-1", t0),
            "taken: the store must hear of it"
        );
        assert!(bindings.speak("pod-1", None, t0).is_err());
    }
}
