//! A token issuer a test makes: fresh RSA and P-256 keys, their JSON Web
//! Key Set, and projected service-account tokens signed by them.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::pkcs8::EncodePrivateKey;
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

pub struct Issuer {
    pub rsa: EncodingKey,
    pub ec: EncodingKey,
    pub jwks: Value,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Issuer {
    pub fn new() -> Self {
        let mut rng = rsa::rand_core::OsRng;
        let rsa = rsa::RsaPrivateKey::new(&mut rng, 2048).unwrap();
        let ec = p256::SecretKey::random(&mut rng);
        let point = ec.public_key().to_encoded_point(false);
        let jwks = json!({"keys": [
            {"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig",
             "n": b64(&rsa.n().to_bytes_be()), "e": b64(&rsa.e().to_bytes_be())},
            {"kty": "EC", "kid": "ec-1", "crv": "P-256",
             "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())},
        ]});
        Self {
            rsa: EncodingKey::from_rsa_der(rsa.to_pkcs1_der().unwrap().as_bytes()),
            ec: EncodingKey::from_ec_der(ec.to_pkcs8_der().unwrap().as_bytes()),
            jwks,
        }
    }

    /// A token for `claims`, signed RS256 (kid rsa-1) or ES256 (kid ec-1).
    pub fn sign(&self, claims: &Value, ec: bool) -> String {
        let (alg, kid, key) = if ec {
            (Algorithm::ES256, "ec-1", &self.ec)
        } else {
            (Algorithm::RS256, "rsa-1", &self.rsa)
        };
        let header = Header {
            kid: Some(kid.into()),
            ..Header::new(alg)
        };
        encode(&header, claims, key).unwrap()
    }
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The claims of a projected token for `namespace/name`, valid for 10 minutes.
pub fn claims(namespace: &str, name: &str) -> Value {
    json!({
        "aud": ["stormguard"],
        "iss": "https://kubernetes.default.svc",
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "iat": now(), "nbf": now(), "exp": now() + 600,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name}},
    })
}
