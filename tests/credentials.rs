//! The test credentials every client's conformance tests use against the
//! real daemon (clients/credentials/): a token issuer's key set with a
//! valid and an expired service-account token, and a CA with the daemon's
//! certificate for loopback and a client's certificate. They are for tests
//! only. STORMGUARD_WRITE_CREDENTIALS=1 makes new ones; this test checks
//! that the committed ones still do what the scenarios rely on.

mod common;

use std::path::Path;

use common::certs::Ca;
use common::issuer::{claims, Issuer};
use serde_json::{json, Value};
use stormguard::identity::{Callers, Mode, Refusal, TokenRules};
use stormguard::tls::{Tls, TlsFiles};

const DIR: &str = "clients/credentials";
const ISSUER: &str = "https://kubernetes.default.svc";
/// 2100-01-01: the valid token outlives the tests.
const FAR: u64 = 4_102_444_800;
/// 2023-11-14, and ten minutes later.
const PAST: (u64, u64) = (1_700_000_000, 1_700_000_600);

fn path(name: &str) -> std::path::PathBuf {
    Path::new(DIR).join(name)
}

fn write() {
    std::fs::create_dir_all(DIR).unwrap();
    let issuer = Issuer::new();
    let token = |valid: (u64, u64)| {
        let mut claims = claims("shop", "checkout");
        (claims["iat"], claims["nbf"], claims["exp"]) = (json!(valid.0), json!(valid.0), json!(valid.1));
        issuer.sign(&claims, false)
    };
    let tokens = json!({
        "about": "Service-account tokens for the conformance scenarios, signed by the keys in jwks.json, for tests only: run the daemon with --token-keys jwks.json --token-issuer <issuer>. `valid` speaks as shop/checkout until 2100; `expired` ended in 2023. Regenerate with STORMGUARD_WRITE_CREDENTIALS=1 cargo test --test credentials.",
        "issuer": ISSUER,
        "audience": "stormguard",
        "identity": "shop/checkout",
        "valid": token((PAST.0, FAR)),
        "expired": token(PAST),
    });
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap() + "\n";
    std::fs::write(path("jwks.json"), pretty(&issuer.jwks)).unwrap();
    std::fs::write(path("tokens.json"), pretty(&tokens)).unwrap();
    let ca = Ca::new("stormguard conformance CA (tests only)");
    let (daemon, client) = (ca.server(), ca.client("checkout"));
    for (name, text) in [
        ("ca.crt", &ca.pem()),
        ("daemon.crt", &daemon.cert),
        ("daemon.key", &daemon.key),
        ("client.crt", &client.cert),
        ("client.key", &client.key),
    ] {
        std::fs::write(path(name), text).unwrap();
    }
}

#[test]
fn the_committed_credentials_do_what_the_scenarios_rely_on() {
    if std::env::var_os("STORMGUARD_WRITE_CREDENTIALS").is_some() {
        write();
    }
    let tokens: Value = serde_json::from_str(&std::fs::read_to_string(path("tokens.json")).unwrap()).unwrap();
    let callers = Callers::new(
        Mode::Required,
        TokenRules {
            audience: tokens["audience"].as_str().unwrap().into(),
            issuer: Some(tokens["issuer"].as_str().unwrap().into()),
            keys_file: path("jwks.json"),
        },
    )
    .unwrap();
    let valid = callers.verify(tokens["valid"].as_str().unwrap()).unwrap();
    assert_eq!(valid.to_string(), tokens["identity"]);
    assert_eq!(
        callers.verify(tokens["expired"].as_str().unwrap()),
        Err(Refusal::Expired)
    );

    let tls = Tls::load(TlsFiles {
        cert: path("daemon.crt"),
        key: path("daemon.key"),
        client_ca: Some(path("ca.crt")),
    });
    assert!(tls.is_ok(), "{:?}", tls.err());
    let client = Tls::load(TlsFiles {
        cert: path("client.crt"),
        key: path("client.key"),
        client_ca: None,
    });
    assert!(client.is_ok(), "the client's pair matches: {:?}", client.err());
}
