//! Tests of service-account tokens: who each names, and each forged, expired or misdirected token
//! refused for its reason.

use axum::http::{header, HeaderMap, HeaderValue};
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

#[path = "../../tests/common/issuer.rs"]
mod issuer;

use issuer::{claims, now, Issuer};

fn callers(mode: Mode, issuer: &Issuer) -> (tempfile::TempDir, Callers) {
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("jwks.json");
    std::fs::write(&keys_file, issuer.jwks.to_string()).unwrap();
    let rules = TokenRules {
        audience: "stormguard".into(),
        issuer: Some("https://kubernetes.default.svc".into()),
        keys_file,
    };
    (dir, Callers::new(mode, rules).unwrap())
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

#[test]
fn rs256_and_es256_tokens_name_their_service_account() {
    let issuer = Issuer::new();
    let (_dir, callers) = callers(Mode::Required, &issuer);
    for ec in [false, true] {
        let token = issuer.sign(&claims("shop", "checkout"), ec);
        let caller = callers.caller(&bearer(&token)).unwrap().unwrap();
        assert_eq!(caller.to_string(), "shop/checkout");
    }
}

#[test]
fn each_forged_expired_or_misdirected_token_is_refused_for_its_reason() {
    let issuer = Issuer::new();
    let other = Issuer::new();
    let (_dir, callers) = callers(Mode::Required, &issuer);
    let good = claims("shop", "checkout");
    let unsigned = |alg: &str| {
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.", b64(&json!({"alg": alg, "kid": "rsa-1"})), b64(&good))
    };
    let hmac = encode(
        &Header {
            kid: Some("rsa-1".into()),
            ..Header::new(Algorithm::HS256)
        },
        &good,
        &EncodingKey::from_secret(issuer.jwks["keys"][0]["n"].as_str().unwrap().as_bytes()),
    )
    .unwrap();
    let cases = [
        (
            issuer.sign(&with(good.clone(), "exp", json!(now() - 3600)), false),
            "expired",
        ),
        (
            issuer.sign(&with(good.clone(), "nbf", json!(now() + 3600)), true),
            "not_yet_valid",
        ),
        (
            issuer.sign(&with(good.clone(), "aud", json!(["vault"])), false),
            "audience",
        ),
        (
            issuer.sign(&with(good.clone(), "iss", json!("https://evil.example")), true),
            "issuer",
        ),
        (other.sign(&good, false), "signature"),
        (other.sign(&good, true), "signature"),
        (unsigned("none"), "algorithm"),
        (hmac, "algorithm"),
        (
            issuer.sign(&with(good.clone(), "sub", json!("admin")), false),
            "subject",
        ),
        ("not.a-token".to_string(), "malformed"),
    ];
    for (token, reason) in &cases {
        let refused = callers.caller(&bearer(token)).unwrap_err();
        assert_eq!(refused.reason(), *reason, "{refused}");
    }
    assert_eq!(callers.caller(&HeaderMap::new()).unwrap_err(), Refusal::Missing);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated-away".into());
    let unknown = encode(&header, &good, &issuer.rsa).unwrap();
    assert_eq!(
        callers.caller(&bearer(&unknown)).unwrap_err().reason(),
        "unknown_key"
    );
    assert_eq!(callers.refusals.with_label_values(&["algorithm"]).get(), 2);
    assert_eq!(callers.refusals.with_label_values(&["signature"]).get(), 2);
}

#[test]
fn a_token_is_expired_once_past_the_clock_skew_allowance() {
    let issuer = Issuer::new();
    let (_dir, callers) = callers(Mode::Required, &issuer);
    let skew = CLOCK_SKEW_SECS;
    let ended = |ago: u64| {
        issuer.sign(
            &with(claims("shop", "checkout"), "exp", json!(now() - ago)),
            false,
        )
    };
    assert!(callers.caller(&bearer(&ended(skew / 2))).is_ok());
    assert_eq!(
        callers.caller(&bearer(&ended(skew + 2))).unwrap_err(),
        Refusal::Expired
    );
    let starts = |ahead: u64| {
        issuer.sign(
            &with(claims("shop", "checkout"), "nbf", json!(now() + ahead)),
            true,
        )
    };
    assert!(callers.caller(&bearer(&starts(skew / 2))).is_ok());
    assert_eq!(
        callers.caller(&bearer(&starts(skew + 2))).unwrap_err(),
        Refusal::NotYetValid
    );
}

#[test]
fn optional_mode_serves_callers_without_a_token_and_counts_them() {
    let issuer = Issuer::new();
    let (_dir, callers) = callers(Mode::Optional, &issuer);
    assert_eq!(callers.caller(&HeaderMap::new()), Ok(None));
    assert_eq!(callers.unauthenticated.get(), 1);
    let expired = issuer.sign(&with(claims("a", "b"), "exp", json!(now() - 3600)), false);
    assert_eq!(
        callers.caller(&bearer(&expired)).unwrap_err(),
        Refusal::Expired,
        "a bad token is still refused"
    );
}

#[test]
fn off_looks_at_nothing() {
    assert_eq!(Callers::off().caller(&bearer("garbage")), Ok(None));
}

#[test]
fn a_key_set_that_cannot_be_used_names_the_key_and_the_keys_in_use_stay() {
    let issuer = Issuer::new();
    let (dir, callers) = callers(Mode::Required, &issuer);
    let bad = [
        (json!({"keys": []}), "no keys"),
        (
            json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}),
            "keys[0]: kty \"oct\"",
        ),
        (
            json!({"keys": [issuer.jwks["keys"][0], issuer.jwks["keys"][0]]}),
            "keys[1]: kid \"rsa-1\" is used by an earlier key",
        ),
        (
            json!({"keys": [{"kty": "EC", "crv": "P-384", "x": "", "y": ""}]}),
            "curve \"P-384\"",
        ),
        (
            json!({"keys": [with(issuer.jwks["keys"][0].clone(), "alg", json!("RS512"))]}),
            "alg \"RS512\"",
        ),
    ];
    for (text, message) in bad {
        std::fs::write(dir.path().join("jwks.json"), text.to_string()).unwrap();
        let error = callers.reload_keys().unwrap_err().to_string();
        assert!(error.contains(message), "{error}");
    }
    let token = issuer.sign(&claims("shop", "checkout"), true);
    assert!(
        callers.caller(&bearer(&token)).is_ok(),
        "the last good keys still verify"
    );
}

#[test]
fn a_rotated_key_file_is_followed_and_its_reloads_counted() {
    let issuer = Issuer::new();
    let rotated = Issuer::new();
    let (dir, callers) = callers(Mode::Required, &issuer);
    let token = rotated.sign(&claims("shop", "checkout"), false);
    assert_eq!(callers.caller(&bearer(&token)).unwrap_err(), Refusal::Signature);
    std::fs::write(dir.path().join("jwks.json"), "{ not keys").unwrap();
    callers.keys_seen.lock().unwrap().0 -= KEYS_RECHECK;
    assert!(
        callers
            .caller(&bearer(&issuer.sign(&claims("a", "b"), true)))
            .is_ok(),
        "a bad file keeps the keys"
    );
    std::fs::write(dir.path().join("jwks.json"), rotated.jwks.to_string()).unwrap();
    callers.keys_seen.lock().unwrap().0 -= KEYS_RECHECK;
    assert!(callers.caller(&bearer(&token)).is_ok(), "the rotated keys verify");
    assert_eq!(callers.key_reloads.count("failure"), 1);
    assert_eq!(callers.key_reloads.count("success"), 1);
}
