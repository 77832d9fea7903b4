//! The OpenAPI contract and the daemon's routes, kept in step: every route
//! is documented, every documented operation is routed and answers only
//! with a documented status, and the daemon serves the document it keeps.
//! (schemathesis checks the rest against the real daemon in .ci/run.)

mod common;

use std::collections::BTreeSet;

use common::{ConfigMapDir, Daemon, SEED_POLICY, TOKEN};
use reqwest::{Method, StatusCode};
use serde_yaml::Value;
use stormguard::server::{ADMIN_PATHS, OPENAPI, PUBLIC_PATHS};

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

fn document() -> Value {
    serde_yaml::from_str(&std::fs::read_to_string("docs/openapi.yaml").unwrap()).unwrap()
}

/// Every documented operation: path, method, and the statuses it may answer.
fn operations(doc: &Value) -> Vec<(String, String, BTreeSet<u16>)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_mapping().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                let statuses = op["responses"]
                    .as_mapping()
                    .unwrap()
                    .keys()
                    .map(|k| k.as_str().unwrap().parse().unwrap())
                    .collect();
                out.push((path.as_str().unwrap().to_owned(), method.to_owned(), statuses));
            }
        }
    }
    out
}

#[test]
fn every_route_is_documented_and_every_documented_path_is_routed() {
    let doc = document();
    let documented: BTreeSet<&str> = doc["paths"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    let routed: BTreeSet<&str> = PUBLIC_PATHS.iter().chain(&ADMIN_PATHS).copied().collect();
    assert_eq!(documented, routed);
    assert_eq!(OPENAPI, std::fs::read_to_string("docs/openapi.yaml").unwrap());
}

#[tokio::test]
async fn each_documented_operation_answers_with_a_documented_status_and_others_are_405() {
    let dir = ConfigMapDir::new(&SEED_POLICY.replace(
        "  payment-service:",
        "  payment-service:\n    gate: {enabled: true}",
    ));
    let daemon = Daemon::start(&dir.policy(), &[]);
    let client = reqwest::Client::new();
    let served = client.get(daemon.url("/openapi.yaml")).send().await.unwrap();
    assert_eq!(served.headers()["content-type"], "application/yaml");
    assert_eq!(served.text().await.unwrap(), OPENAPI);

    let doc = document();
    for (path, method, statuses) in operations(&doc) {
        let url = daemon.url(
            &path
                .replace("{service}", "payment-service")
                .replace("{format}", "envoy"),
        );
        let body = match path.as_str() {
            "/v1/reports" => r#"{"service": "payment-service", "instance": "p-1"}"#,
            "/v1/pace" => {
                r#"{"service": "payment-service", "instance": "p-1", "sent": 1, "accepted": 0, "overloaded": 1, "waiting": 3}"#
            }
            "/admin/validate" => "defaults: {maxRetries: 2}\n",
            _ => "",
        };
        let request = client
            .request(
                Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                &url,
            )
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body);
        let status = request.send().await.unwrap().status().as_u16();
        assert!(
            statuses.contains(&status),
            "{method} {path}: {status}, documented {statuses:?}"
        );
        assert!(
            (200..300).contains(&status),
            "{method} {path} answers a good request with {status}"
        );
        for other in METHODS
            .iter()
            .filter(|m| doc["paths"][path.as_str()].get(**m).is_none())
        {
            let answer = client
                .request(Method::from_bytes(other.to_uppercase().as_bytes()).unwrap(), &url)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED, "{other} {path}");
        }
    }
}
