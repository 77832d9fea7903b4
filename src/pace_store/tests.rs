//! Tests of the pace store's client that need no Redis: secrets kept out of messages, bad
//! addresses, what is sent again, its own counts.

use super::*;

#[test]
fn a_password_never_reaches_a_message() {
    assert_eq!(
        redacted("redis://:s3cret@redis:6379/2"),
        "redis://:***@redis:6379/2"
    );
    assert_eq!(
        redacted("rediss://pacer:s3cret@redis:6380"),
        "rediss://pacer:***@redis:6380"
    );
    assert_eq!(redacted("redis://pacer@redis:6379"), "redis://pacer@redis:6379");
    assert_eq!(redacted("redis://redis:6379"), "redis://redis:6379");
    let error = PaceStore::new(
        "redis://:s3cret@",
        Access::default(),
        "a".into(),
        &Registry::new(),
    )
    .err()
    .expect("no host");
    assert!(!error.to_string().contains("s3cret"), "{error}");
}

#[test]
fn an_address_that_is_not_redis_is_refused_at_once() {
    let error = PaceStore::new(
        "http://redis:6379",
        Access::default(),
        "a".into(),
        &Registry::new(),
    )
    .err()
    .expect("not redis");
    assert_eq!(error.kind(), "address");
    assert!(
        error.to_string().starts_with("--pace-store http://redis:6379"),
        "{error}"
    );
}

#[test]
fn only_a_call_that_surely_wrote_nothing_is_sent_again() {
    let at = "redis://127.0.0.1:6379".to_string();
    assert!(StoreError::Contended {
        at: at.clone(),
        tries: 4
    }
    .wrote_nothing());
    assert!(StoreError::Address(at.clone(), "no".into()).wrote_nothing());
    // A timed-out compare-and-set may have written before its answer was lost.
    assert!(!StoreError::Timeout(at.clone()).wrote_nothing());
    assert!(!StoreError::Malformed {
        at,
        what: "time".into()
    }
    .wrote_nothing());
}

/// Every call is timed and every failure counted by its kind, in the
/// families the store registers itself.
#[tokio::test]
async fn the_store_counts_its_own_calls_and_failures() {
    // Bound but never listening: a connection to it is refused, and the
    // port stays this test's.
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    let registry = Registry::new();
    let store = PaceStore::new(&url, Access::default(), "a".into(), &registry).unwrap();
    let error = store
        .first_count("pod-a", 1, Duration::from_secs(1), 8)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "refused");
    let shown = registry.text(tokio::time::Instant::now());
    assert!(
        shown.contains("stormguard_pace_store_seconds_count 0"),
        "a refusal is no round trip: {shown}"
    );
    assert!(
        shown.contains("stormguard_pace_store_errors_total{kind=\"refused\"} 1"),
        "{shown}"
    );
}
