//! What must be one across replicas about each reporting instance: who
//! owns it, and which of its report batches were counted. Without a store,
//! each replica keeps both alone (`crate::identity::Bindings`,
//! `crate::reports::BatchLog`), so a batch resent to the other replica
//! would be counted twice and an instance could be taken over there.

use std::time::Duration;

use super::{PaceStore, StoreError};
use crate::identity::Identity;

impl PaceStore {
    /// Binds `instance` to `caller` fleet-wide for `ttl` unless another
    /// caller owns it: the owner after the call (none: nobody owns it).
    pub async fn bind(
        &self,
        instance: &str,
        caller: Option<&Identity>,
        ttl: Duration,
    ) -> Result<Option<Identity>, StoreError> {
        self.counted(self.bind_uncounted(instance, caller, ttl)).await
    }

    async fn bind_uncounted(
        &self,
        instance: &str,
        caller: Option<&Identity>,
        ttl: Duration,
    ) -> Result<Option<Identity>, StoreError> {
        let mut invocation = self.bind.prepare_invoke();
        invocation
            .key(instance_key(instance, "owner"))
            .arg(caller.map_or(String::new(), Identity::to_string))
            .arg(ttl.as_millis().max(1) as u64);
        let mut connection = self.connection().await?;
        let owner: Option<String> = self.bounded(invocation.invoke_async(&mut connection)).await?;
        owner
            .map(|text| {
                parse_identity(&text).ok_or_else(|| StoreError::Malformed {
                    at: self.at.clone(),
                    what: format!("owner {text:?}"),
                })
            })
            .transpose()
    }

    /// Records batch `sequence` of `instance` fleet-wide, among the last
    /// `remembered` of its batches: true the first time any replica records
    /// it within `window` of the instance's last batch.
    pub async fn first_count(
        &self,
        instance: &str,
        sequence: u64,
        window: Duration,
        remembered: usize,
    ) -> Result<bool, StoreError> {
        self.counted(self.first_count_uncounted(instance, sequence, window, remembered))
            .await
    }

    async fn first_count_uncounted(
        &self,
        instance: &str,
        sequence: u64,
        window: Duration,
        remembered: usize,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.batch.prepare_invoke();
        invocation
            .key(instance_key(instance, "batches"))
            .arg(sequence)
            .arg(window.as_millis().max(1) as u64)
            .arg(remembered);
        let mut connection = self.connection().await?;
        let first: i64 = self.bounded(invocation.invoke_async(&mut connection)).await?;
        Ok(first == 1)
    }
}

/// One of `instance`'s keys, its name the hash tag.
fn instance_key(instance: &str, what: &str) -> String {
    format!("stormguard:instance:{{{instance}}}:{what}")
}

/// `namespace/service-account`, as [`Identity`]'s display writes it.
fn parse_identity(text: &str) -> Option<Identity> {
    let (namespace, service_account) = text.split_once('/')?;
    (!namespace.is_empty() && !service_account.is_empty()).then(|| Identity {
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_reads_back_as_it_was_written() {
        let who = Identity {
            namespace: "shop".into(),
            service_account: "checkout".into(),
        };
        assert_eq!(parse_identity(&who.to_string()), Some(who));
        assert_eq!(parse_identity("checkout"), None);
        assert_eq!(parse_identity("/checkout"), None);
    }

    #[test]
    fn an_instances_keys_share_its_name_as_the_hash_tag() {
        assert_eq!(
            instance_key("pod-1", "owner"),
            "stormguard:instance:{pod-1}:owner"
        );
    }
}
