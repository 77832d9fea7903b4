//! Which service account speaks for which instance: the first verified
//! caller to name an instance owns it until the instance goes quiet, so a
//! workload with a valid token of its own still cannot report or ask for
//! pace under another workload's instance names.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Identity;

/// Instances and their owners, bounded in number and time.
pub struct Bindings {
    ttl: Duration,
    max: usize,
    owners: Mutex<HashMap<String, (Identity, Instant)>>,
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

    /// Whether `caller` may speak for `instance` at `now`; a verified caller
    /// naming a free instance takes it. Past `max` bound instances, a new
    /// instance is served unbound rather than refused.
    pub fn speak(&self, instance: &str, caller: Option<&Identity>, now: Instant) -> Result<(), NotYours> {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, last)) = owners.get_mut(instance) {
            if now.saturating_duration_since(*last) < self.ttl {
                if Some(&*owner) != caller {
                    return Err(NotYours {
                        instance: instance.to_string(),
                        owner: owner.clone(),
                        caller: caller.cloned(),
                    });
                }
                *last = now;
                return Ok(());
            }
            owners.remove(instance);
        }
        let Some(caller) = caller else { return Ok(()) };
        if owners.len() >= self.max {
            let ttl = self.ttl;
            owners.retain(|_, (_, last)| now.saturating_duration_since(*last) < ttl);
        }
        if owners.len() < self.max {
            owners.insert(instance.to_string(), (caller.clone(), now));
        }
        Ok(())
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
}
