//! What each replica's processes claim of a fleet-scoped retry budget's
//! floor, so that every replica divides one floor among the whole fleet.

use std::time::Duration;

use stormguard_core::fleet::floor::Claims;

use super::{PaceStore, StoreError};

impl PaceStore {
    /// Keeps `mine`, what this replica's processes claim of `service`'s
    /// floor, and answers what the other replicas' claim: replicas not
    /// heard from within `window` no longer count.
    pub async fn share_claims(
        &self,
        service: &str,
        mine: Claims,
        window: Duration,
    ) -> Result<Claims, StoreError> {
        self.counted(self.share_claims_uncounted(service, mine, window))
            .await
    }

    async fn share_claims_uncounted(
        &self,
        service: &str,
        mine: Claims,
        window: Duration,
    ) -> Result<Claims, StoreError> {
        let rate = if mine.requests_per_second.is_finite() {
            mine.requests_per_second.max(0.0)
        } else {
            0.0
        };
        let mut invocation = self.claims.prepare_invoke();
        invocation
            .key(format!("stormguard:budget:{{{service}}}:claims"))
            .arg(&self.replica)
            .arg(rate.to_string())
            .arg(mine.processes)
            .arg(window.as_millis().max(1) as u64);
        let mut connection = self.connection().await?;
        let (rate, processes): (String, String) =
            self.bounded(invocation.invoke_async(&mut connection)).await?;
        let malformed = |what: &str, text: &str| StoreError::Malformed {
            at: self.at.clone(),
            what: format!("{what} {text:?}"),
        };
        Ok(Claims {
            requests_per_second: rate
                .parse::<f64>()
                .ok()
                .filter(|r| r.is_finite() && *r >= 0.0)
                .ok_or_else(|| malformed("claimed rate", &rate))?,
            processes: processes
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p >= 0.0)
                .map(|p| p as u64)
                .ok_or_else(|| malformed("processes", &processes))?,
        })
    }
}
