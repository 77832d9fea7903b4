//! The token issuer's public keys: a JSON Web Key Set, as a Kubernetes
//! cluster publishes it at `/openid/v1/jwks` (`kubectl get --raw
//! /openid/v1/jwks`), read from a file so no request waits on the API server.

use std::collections::HashMap;
use std::path::Path;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

/// Keys by their `kid`, each with the one algorithm it verifies.
pub struct KeySet {
    keys: HashMap<String, (Algorithm, DecodingKey)>,
}

/// A key set that cannot be used, naming the key and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct KeysError {
    /// The file, and the key within it (`keys[1]`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// Reads and checks the key set at `path`.
    pub fn load(path: &Path) -> Result<Self, KeysError> {
        let text = std::fs::read_to_string(path).map_err(|e| KeysError {
            path: path.display().to_string(),
            message: format!("cannot read the token keys: {e}"),
        })?;
        Self::parse(&text).map_err(|mut e| {
            e.path = format!("{}: {}", path.display(), e.path);
            e
        })
    }

    /// Checks a key set's text: every key must be an RS256 or ES256 (P-256)
    /// signing key with a distinct `kid`, and there must be at least one.
    pub fn parse(text: &str) -> Result<Self, KeysError> {
        let jwks: Jwks = serde_json::from_str(text).map_err(|e| KeysError {
            path: "keys".into(),
            message: format!("not a JSON Web Key Set: {e}"),
        })?;
        if jwks.keys.is_empty() {
            return Err(KeysError {
                path: "keys".into(),
                message: "no keys: every token would be refused".into(),
            });
        }
        let mut keys = HashMap::new();
        for (i, jwk) in jwks.keys.iter().enumerate() {
            let fail = |message: String| KeysError {
                path: format!("keys[{i}]"),
                message,
            };
            let (algorithm, key) = decoding_key(jwk).map_err(fail)?;
            let kid = jwk.kid.clone().unwrap_or_default();
            if keys.insert(kid.clone(), (algorithm, key)).is_some() {
                return Err(fail(format!("kid {kid:?} is used by an earlier key too")));
            }
        }
        Ok(Self { keys })
    }

    /// The key a token's header names, with its algorithm.
    pub fn get(&self, kid: Option<&str>) -> Option<&(Algorithm, DecodingKey)> {
        self.keys.get(kid.unwrap_or(""))
    }

    /// How many keys there are (at least one).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never: a key set without keys is refused.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn decoding_key(jwk: &Jwk) -> Result<(Algorithm, DecodingKey), String> {
    if jwk.usage.as_deref().is_some_and(|u| u != "sig") {
        return Err(format!(
            "use {:?}: only signing keys (\"sig\") verify tokens",
            jwk.usage.as_deref().unwrap_or("")
        ));
    }
    let field = |name: &str, value: &Option<String>| {
        value
            .clone()
            .ok_or_else(|| format!("{} key without {name:?}", jwk.kty))
    };
    let (algorithm, key) = match jwk.kty.as_str() {
        "RSA" => {
            let key = DecodingKey::from_rsa_components(&field("n", &jwk.n)?, &field("e", &jwk.e)?);
            (
                Algorithm::RS256,
                key.map_err(|e| format!("not an RSA public key: {e}"))?,
            )
        }
        "EC" if jwk.crv.as_deref() == Some("P-256") => {
            let key = DecodingKey::from_ec_components(&field("x", &jwk.x)?, &field("y", &jwk.y)?);
            (
                Algorithm::ES256,
                key.map_err(|e| format!("not a P-256 public key: {e}"))?,
            )
        }
        "EC" => {
            return Err(format!(
                "curve {:?}: only P-256 (ES256) is accepted",
                jwk.crv.as_deref().unwrap_or("")
            ))
        }
        other => {
            return Err(format!(
                "kty {other:?}: only RSA (RS256) and EC P-256 (ES256) keys are accepted"
            ))
        }
    };
    let named = jwk.alg.as_deref().unwrap_or(match algorithm {
        Algorithm::RS256 => "RS256",
        _ => "ES256",
    });
    let expected = if algorithm == Algorithm::RS256 {
        "RS256"
    } else {
        "ES256"
    };
    if named != expected {
        return Err(format!(
            "alg {named:?}: a {} key verifies {expected} only",
            jwk.kty
        ));
    }
    Ok((algorithm, key))
}
