//! A loaded policy, with every response body and ETag, and every
//! service's validated policy, computed once per reload, and the store that
//! swaps snapshots atomically.
//!
//! Serving is a lookup: a request picks a prepared body by service name. Bodies
//! hold nothing per process (no load time, no counter), so every replica that
//! serves the same file answers with the same bytes and the same ETags.

use foldhash::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use axum::http::HeaderValue;
use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};
use stormguard_core::policy::{BudgetPolicy, PolicyDocument, ResolvedPolicy, RetryPolicy, ValidPolicy};
use stormguard_core::wire::SelectedPolicy;
use tokio::sync::watch;

use stormguard_toolkit::policy::{ContentHash, Diagnostic};

/// One prepared response: its JSON body and strong ETag.
#[derive(Debug, Clone)]
pub struct Served {
    /// The JSON body.
    pub body: Bytes,
    /// The ETag, quoted, derived from the body's content.
    pub etag: HeaderValue,
    /// The body's length, as a `Content-Length` value.
    pub length: HeaderValue,
}

impl Served {
    fn new(body: Vec<u8>, etag: HeaderValue) -> Self {
        Self {
            length: HeaderValue::from(body.len()),
            etag,
            body: Bytes::from(body),
        }
    }

    fn json(value: &impl Serialize) -> Self {
        let body = serde_json::to_vec(value).expect("policy JSON has string keys and finite numbers");
        let etag = quoted_etag(&Sha256::digest(&body));
        Self::new(body, etag)
    }
}

/// A strong ETag from the first 128 bits of a SHA-256 digest.
fn quoted_etag(digest: &[u8]) -> HeaderValue {
    let hex = stormguard_toolkit::policy::hex(&digest[..16]);
    HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a valid header")
}

/// A validated policy file and everything served from it.
#[derive(Debug)]
pub struct PolicySnapshot {
    /// The hash of the file's bytes.
    pub hash: ContentHash,
    /// When this process loaded it.
    pub loaded_at: SystemTime,
    /// The file it came from.
    pub source: PathBuf,
    /// The decoded document.
    pub document: PolicyDocument,
    /// `GET /v1/policies`.
    pub all: Served,
    services: HashMap<String, ServiceAnswers>,
    unknown_service: ServiceAnswers,
}

/// One service's answers: alone, and as its entry in a selection of several.
#[derive(Debug)]
struct ServiceAnswers {
    alone: Served,
    entry: Bytes,
    budget: BudgetPolicy,
    /// The policy the daemon's fleet pacing and breakers apply.
    policy: ValidPolicy,
}

impl ServiceAnswers {
    fn new(resolved: &ResolvedPolicy) -> Result<Self, stormguard_core::policy::InvalidPolicy> {
        let policy = ValidPolicy::try_from(resolved.policy.clone())?;
        let alone = Served::json(resolved);
        let entry = SelectedPolicy {
            etag: alone.etag.to_str().expect("the ETag is hex").to_owned(),
            resolved: resolved.clone(),
        };
        let entry = serde_json::to_vec(&entry).expect("policy JSON has string keys and finite numbers");
        Ok(Self {
            alone,
            entry: Bytes::from(entry),
            budget: resolved.policy.budget.clone(),
            policy,
        })
    }
}

/// The body of `GET /v1/policies`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AllPolicies<'a> {
    version: String,
    gateway_retries: bool,
    defaults: &'a RetryPolicy,
    services: &'a std::collections::BTreeMap<String, ResolvedPolicy>,
}

impl PolicySnapshot {
    /// Prepares every body of `document`, loaded from `source` with `hash`,
    /// and every service's validated policy: a service whose resolved
    /// policy does not validate is refused here, naming it, so that what is
    /// served can be applied without checking again. (Loading validates
    /// every service already; this keeps it so by construction.)
    pub fn new(document: PolicyDocument, hash: ContentHash, source: PathBuf) -> Result<Self, Diagnostic> {
        let resolved: std::collections::BTreeMap<String, ResolvedPolicy> = document
            .services
            .keys()
            .map(|name| (name.clone(), document.resolve(name)))
            .collect();
        let defaults = document.defaults_policy();
        let all = Served::json(&AllPolicies {
            version: hash.to_string(),
            gateway_retries: document.gateway_retries,
            defaults: &defaults,
            services: &resolved,
        });
        let invalid = |key: String, error: stormguard_core::policy::InvalidPolicy| Diagnostic {
            file: source.display().to_string(),
            line: None,
            column: None,
            path: Some(key),
            message: format!("does not resolve to a valid policy: {error}"),
        };
        let services = resolved
            .iter()
            .map(|(name, policy)| {
                let answers =
                    ServiceAnswers::new(policy).map_err(|e| invalid(format!("services.{name}"), e))?;
                Ok((name.clone(), answers))
            })
            .collect::<Result<_, Diagnostic>>()?;
        // Any name not in the file resolves to the defaults: one body serves them all.
        let unknown_service =
            ServiceAnswers::new(&document.resolve("")).map_err(|e| invalid("defaults".into(), e))?;
        Ok(Self {
            hash,
            loaded_at: SystemTime::now(),
            source,
            document,
            all,
            services,
            unknown_service,
        })
    }

    /// The prepared response for `service`; the defaults for a service not in the file.
    pub fn service(&self, service: &str) -> &Served {
        &self.answers(service).alone
    }

    /// `service`'s resolved retry budget; the defaults' for a service not in the file.
    pub fn budget(&self, service: &str) -> &BudgetPolicy {
        &self.answers(service).budget
    }

    /// `service`'s validated policy; the defaults' for a service not in the file.
    pub fn policy(&self, service: &str) -> &ValidPolicy {
        &self.answers(service).policy
    }

    fn answers(&self, service: &str) -> &ServiceAnswers {
        self.services.get(service).unwrap_or(&self.unknown_service)
    }

    /// The answer to `GET /v1/policies?services=…` for `names` (sorted, no
    /// repeats): each one's entry, and an ETag derived from their ETags, so
    /// it changes exactly when one of theirs does.
    pub fn selection(&self, names: &[String]) -> Served {
        let mut body = Vec::with_capacity(16 + names.len() * 512);
        let mut digest = Sha256::new();
        body.extend_from_slice(b"{\"services\":{");
        for (i, name) in names.iter().enumerate() {
            let answers = self.answers(name);
            if i > 0 {
                body.push(b',');
            }
            serde_json::to_writer(&mut body, name).expect("a string serializes");
            body.push(b':');
            body.extend_from_slice(&answers.entry);
            digest.update(name.as_bytes());
            digest.update(b"\0");
            digest.update(answers.alone.etag.as_bytes());
            digest.update(b"\0");
        }
        body.extend_from_slice(b"}}");
        Served::new(body, quoted_etag(&digest.finalize()))
    }
}

/// The current snapshot, swapped whole on reload, and a signal for waiters.
pub struct PolicyStore {
    current: ArcSwap<PolicySnapshot>,
    changed: watch::Sender<()>,
}

impl PolicyStore {
    /// A store serving `first`.
    pub fn new(first: PolicySnapshot) -> Self {
        Self {
            current: ArcSwap::from_pointee(first),
            changed: watch::channel(()).0,
        }
    }

    /// The snapshot being served now.
    pub fn current(&self) -> Arc<PolicySnapshot> {
        self.current.load_full()
    }

    /// Serves `next` from now on and wakes every waiter.
    pub fn swap(&self, next: PolicySnapshot) {
        self.current.store(Arc::new(next));
        self.changed.send_replace(());
    }

    /// A receiver that sees every swap after this call.
    pub fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_toolkit::policy::{load_bytes, LoadLimits};

    fn snapshot(text: &str) -> PolicySnapshot {
        let document = load_bytes("p.yaml", text.as_bytes(), LoadLimits::default()).unwrap();
        PolicySnapshot::new(document, ContentHash::of(text.as_bytes()), "p.yaml".into()).unwrap()
    }

    #[test]
    fn a_service_whose_policy_does_not_validate_is_refused_by_name() {
        let text = "services: {a: {maxRetries: 1}}\n";
        let mut document = load_bytes("p.yaml", text.as_bytes(), LoadLimits::default()).unwrap();
        // Loading refuses this; a document changed after loading is checked again.
        document.services.get_mut("a").unwrap().max_retries = Some(1_000_000);
        let refused = PolicySnapshot::new(document, ContentHash::of(text.as_bytes()), "p.yaml".into())
            .expect_err("an invalid service");
        assert_eq!(refused.path.as_deref(), Some("services.a"));
        assert!(refused.message.contains("maxRetries"), "{}", refused.message);
    }

    #[test]
    fn same_content_gives_same_bytes_and_etags() {
        let text = "defaults: {maxRetries: 2}\nservices: {a: {maxRetries: 1}, b: null}\n";
        let (one, two) = (snapshot(text), snapshot(text));
        assert_eq!(one.all.body, two.all.body);
        assert_eq!(one.all.etag, two.all.etag);
        assert_eq!(one.service("a").etag, two.service("a").etag);
    }

    #[test]
    fn a_service_etag_changes_only_with_its_own_policy() {
        let before = snapshot("services: {a: {maxRetries: 1}, b: {maxRetries: 2}}\n");
        let after = snapshot("services: {a: {maxRetries: 1}, b: {maxRetries: 3}}\n");
        assert_eq!(before.service("a").etag, after.service("a").etag);
        assert_ne!(before.service("b").etag, after.service("b").etag);
        assert_ne!(before.all.etag, after.all.etag);
    }

    #[test]
    fn unknown_services_get_the_defaults_marked_as_such() {
        let snap = snapshot("defaults: {maxRetries: 4}\nservices: {a: {maxRetries: 1}}\n");
        let body: serde_json::Value = serde_json::from_slice(&snap.service("zzz").body).unwrap();
        assert_eq!(body["source"], "defaults");
        assert_eq!(body["policy"]["maxRetries"], 4);
        let known: serde_json::Value = serde_json::from_slice(&snap.service("a").body).unwrap();
        assert_eq!(known["source"], "override");
        assert_eq!(known["overridden"], serde_json::json!(["maxRetries"]));
    }

    #[test]
    fn a_selection_holds_each_service_as_served_alone_and_changes_with_any_of_them() {
        let text = "services: {a: {maxRetries: 1}, b: {maxRetries: 2}, c: {maxRetries: 3}}\n";
        let names = ["a".to_string(), "zzz".to_string()];
        let selection = snapshot(text).selection(&names);
        let body: stormguard_core::wire::SelectedPolicies = serde_json::from_slice(&selection.body).unwrap();
        let snap = snapshot(text);
        for name in &names {
            let entry = &body.services[name];
            assert_eq!(entry.etag, snap.service(name).etag.to_str().unwrap());
            let alone: ResolvedPolicy = serde_json::from_slice(&snap.service(name).body).unwrap();
            assert_eq!(entry.resolved, alone);
        }
        let unrelated = snapshot("services: {a: {maxRetries: 1}, b: {maxRetries: 2}, c: {maxRetries: 4}}\n");
        assert_eq!(unrelated.selection(&names).etag, selection.etag);
        let related = snapshot("services: {a: {maxRetries: 5}, b: {maxRetries: 2}, c: {maxRetries: 3}}\n");
        assert_ne!(related.selection(&names).etag, selection.etag);
        assert_ne!(snap.selection(&names[..1]).etag, selection.etag);
    }

    #[tokio::test]
    async fn swap_wakes_subscribers() {
        let store = PolicyStore::new(snapshot("defaults: {}\n"));
        let mut rx = store.subscribe();
        store.swap(snapshot("defaults: {maxRetries: 1}\n"));
        rx.changed().await.unwrap();
        assert_eq!(store.current().document.defaults_policy().max_retries, 1);
    }
}
