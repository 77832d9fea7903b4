//! `stormguard render` and `GET /v1/render/{format}/{service}`: the same
//! rendering from the command line and from the daemon, and bad input named.

mod common;

use std::path::Path;

use common::Daemon;
use reqwest::StatusCode;
use serde_json::Value;

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("render")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_daemon_and_the_command_line_render_alike_in_every_dialect() {
    let policy = Path::new("policies/full-example.yaml");
    let daemon = Daemon::start(policy, &[]);
    for format in ["grpc", "envoy", "istio", "linkerd"] {
        let served: Value =
            reqwest::get(daemon.url(&format!("/v1/render/{format}/inventory-service?namespace=shop")))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        let printed = cli(&[
            "--format",
            format,
            "--service",
            "inventory-service",
            "--namespace",
            "shop",
            "--policy",
            "policies/full-example.yaml",
            "--json",
        ]);
        assert!(printed.status.success());
        let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
        assert_eq!(served, printed, "{format}");
        assert_eq!(
            served["lost"][0]["key"], "gate",
            "inventory-service paces: {format}"
        );
    }
    let unknown = reqwest::get(daemon.url("/v1/render/nginx/inventory-service"))
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
    let body: Value = unknown.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("grpc, envoy, istio, linkerd"),
        "{body}"
    );
    let namespace = reqwest::get(daemon.url("/v1/render/istio/inventory-service?namespace=Shop"))
        .await
        .unwrap();
    assert_eq!(namespace.status(), StatusCode::BAD_REQUEST);
}

#[test]
fn the_text_form_is_what_each_system_reads_and_the_losses_go_to_stderr() {
    let grpc = cli(&["--format", "grpc", "--service", "payment-service"]);
    assert!(grpc.status.success());
    let config: Value = serde_json::from_slice(&grpc.stdout).expect("a gRPC service config is JSON");
    assert_eq!(config["methodConfig"][0]["retryPolicy"]["maxAttempts"], 3);
    assert!(String::from_utf8_lossy(&grpc.stderr).contains("lost: jitter: "));
    let istio = cli(&["--format", "istio", "--service", "payment-service"]);
    let text = String::from_utf8(istio.stdout).unwrap();
    assert!(
        text.starts_with("apiVersion: networking.istio.io/v1\nkind: VirtualService\n"),
        "{text}"
    );
    let bad = cli(&[
        "--format",
        "istio",
        "--service",
        "payment-service",
        "--namespace",
        "Shop",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--namespace"));
}
