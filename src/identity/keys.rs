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

/// A key set that cannot be used: where, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}{what}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
pub struct KeysError {
    /// The file, when the set was read from one.
    pub file: Option<std::path::PathBuf>,
    /// What is wrong with the set.
    pub what: KeySetProblem,
}

/// What is wrong with a key set.
#[derive(Debug, thiserror::Error)]
pub enum KeySetProblem {
    /// The file cannot be read.
    #[error("cannot read the token keys: {0}")]
    Unreadable(std::io::Error),
    /// It is not JSON in a JSON Web Key Set's shape.
    #[error("keys: not a JSON Web Key Set: {0}")]
    NotJwks(serde_json::Error),
    /// It has no keys.
    #[error("keys: no keys: every token would be refused")]
    Empty,
    /// A key cannot be used.
    #[error("keys[{index}]: {problem}")]
    Key {
        /// Its place in `keys`.
        index: usize,
        /// What is wrong with it.
        problem: KeyProblem,
    },
}

/// What makes one key unusable for checking tokens.
#[derive(Debug, thiserror::Error)]
pub enum KeyProblem {
    /// Its `use` is not `sig`.
    #[error("use {0:?}: only signing keys (\"sig\") verify tokens")]
    NotForSigning(String),
    /// A member its type needs is missing.
    #[error("{kty} key without {member:?}")]
    Missing {
        /// Its `kty`.
        kty: String,
        /// The member.
        member: &'static str,
    },
    /// Its members do not make an RSA public key.
    #[error("not an RSA public key: {0}")]
    Rsa(jsonwebtoken::errors::Error),
    /// Its members do not make a P-256 public key.
    #[error("not a P-256 public key: {0}")]
    P256(jsonwebtoken::errors::Error),
    /// An elliptic curve other than P-256.
    #[error("curve {0:?}: only P-256 (ES256) is accepted")]
    Curve(String),
    /// A key type other than RSA and EC.
    #[error("kty {0:?}: only RSA (RS256) and EC P-256 (ES256) keys are accepted")]
    KeyType(String),
    /// Its `alg` is not the one its type verifies.
    #[error("alg {named:?}: a {kty} key verifies {expected} only")]
    Algorithm {
        /// Its `alg`.
        named: String,
        /// Its `kty`.
        kty: String,
        /// The algorithm it verifies.
        expected: &'static str,
    },
    /// An earlier key has its `kid`.
    #[error("kid {0:?} is used by an earlier key too")]
    DuplicateKid(String),
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
        let in_file = |what| KeysError {
            file: Some(path.to_path_buf()),
            what,
        };
        let text = std::fs::read_to_string(path).map_err(|e| in_file(KeySetProblem::Unreadable(e)))?;
        Self::parse(&text).map_err(|e| in_file(e.what))
    }

    /// Checks a key set's text: every key must be an RS256 or ES256 (P-256)
    /// signing key with a distinct `kid`, and there must be at least one.
    pub fn parse(text: &str) -> Result<Self, KeysError> {
        let fail = |what| KeysError { file: None, what };
        let jwks: Jwks = serde_json::from_str(text).map_err(|e| fail(KeySetProblem::NotJwks(e)))?;
        if jwks.keys.is_empty() {
            return Err(fail(KeySetProblem::Empty));
        }
        let mut keys = HashMap::new();
        for (index, jwk) in jwks.keys.iter().enumerate() {
            let key_fails = |problem| fail(KeySetProblem::Key { index, problem });
            let (algorithm, key) = decoding_key(jwk).map_err(key_fails)?;
            let kid = jwk.kid.clone().unwrap_or_default();
            if keys.insert(kid.clone(), (algorithm, key)).is_some() {
                return Err(key_fails(KeyProblem::DuplicateKid(kid)));
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

fn decoding_key(jwk: &Jwk) -> Result<(Algorithm, DecodingKey), KeyProblem> {
    if let Some(usage) = jwk.usage.as_deref().filter(|u| *u != "sig") {
        return Err(KeyProblem::NotForSigning(usage.to_string()));
    }
    let field = |member: &'static str, value: &Option<String>| {
        value.clone().ok_or_else(|| KeyProblem::Missing {
            kty: jwk.kty.clone(),
            member,
        })
    };
    let (algorithm, key) = match jwk.kty.as_str() {
        "RSA" => {
            let key = DecodingKey::from_rsa_components(&field("n", &jwk.n)?, &field("e", &jwk.e)?);
            (Algorithm::RS256, key.map_err(KeyProblem::Rsa)?)
        }
        "EC" if jwk.crv.as_deref() == Some("P-256") => {
            let key = DecodingKey::from_ec_components(&field("x", &jwk.x)?, &field("y", &jwk.y)?);
            (Algorithm::ES256, key.map_err(KeyProblem::P256)?)
        }
        "EC" => return Err(KeyProblem::Curve(jwk.crv.clone().unwrap_or_default())),
        other => return Err(KeyProblem::KeyType(other.to_string())),
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
        return Err(KeyProblem::Algorithm {
            named: named.to_string(),
            kty: jwk.kty.clone(),
            expected,
        });
    }
    Ok((algorithm, key))
}
