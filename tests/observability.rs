//! The bundled alert rules, dashboards and Kubernetes manifests: every
//! PromQL expression parses, every alert is tested by promtool and has a
//! runbook, every panel is described, and the deploy base stays in sync with
//! the files it copies.

use std::path::Path;
use std::process::Command;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

fn yaml(path: &str) -> Yaml {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json(path: &str) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const DASHBOARDS: [&str; 2] = [
    "dashboards/stormguard-overview.json",
    "dashboards/stormguard-service.json",
];

/// Every rule of the bundled rule file.
fn rules() -> Vec<Yaml> {
    yaml("alerts/stormguard.rules.yaml")["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .collect()
}

/// Every panel of every dashboard, with its dashboard's path.
/// Every panel that shows something; rows only group them (and have a title).
fn panels() -> Vec<(&'static str, Json)> {
    DASHBOARDS
        .iter()
        .flat_map(|path| {
            json(path)["panels"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| {
                    let row = p["type"] == "row";
                    assert!(
                        !row || p["title"].as_str().is_some_and(|t| !t.is_empty()),
                        "{path}: a row without a title"
                    );
                    !row
                })
                .map(|p| (*path, p.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A dashboard query as Prometheus would receive it, its variables filled in.
pub fn instantiate(expr: &str, service: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$service", service)
}

#[test]
fn every_promql_expression_parses() {
    let mut checked = 0;
    for rule in rules() {
        let expr = rule["expr"].as_str().unwrap();
        promql_parser::parser::parse(expr)
            .unwrap_or_else(|e| panic!("rule {:?}: {e}\n{expr}", rule["alert"]));
        checked += 1;
    }
    for (path, panel) in panels() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = instantiate(target["expr"].as_str().unwrap(), "payment-service");
            promql_parser::parser::parse(&expr)
                .unwrap_or_else(|e| panic!("{path} {:?}: {e}\n{expr}", panel["title"]));
            checked += 1;
        }
    }
    for path in DASHBOARDS {
        for annotation in dashboard_annotations(path) {
            let expr = instantiate(annotation["expr"].as_str().unwrap(), "payment-service");
            promql_parser::parser::parse(&expr)
                .unwrap_or_else(|e| panic!("{path} annotation {:?}: {e}\n{expr}", annotation["name"]));
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} expressions");
}

/// A dashboard's annotations.
fn dashboard_annotations(path: &str) -> Vec<Json> {
    json(path)["annotations"]["list"].as_array().unwrap().clone()
}

#[test]
fn both_dashboards_mark_policy_changes_and_failed_reloads() {
    for path in DASHBOARDS {
        let annotations = dashboard_annotations(path);
        let names: Vec<&str> = annotations.iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Policy changed", "Policy reload failed"], "{path}");
        for annotation in &annotations {
            assert_eq!(annotation["datasource"]["uid"], "${datasource}", "{path}");
            assert_eq!(annotation["enable"], true, "{path}");
            assert!(
                annotation["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{path}"
            );
        }
    }
}

#[test]
fn the_articles_alerts_keep_their_thresholds_and_gain_their_guards() {
    let rules = rules();
    let alert = |name: &str| {
        rules
            .iter()
            .find(|r| r["alert"] == name)
            .unwrap_or_else(|| panic!("{name}"))
            .clone()
    };
    let squash = |y: &Yaml| {
        y.as_str()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let high = alert("HighRetryRate");
    assert_eq!(
        squash(&high["expr"]),
        "sum(rate(http_client_retry_attempts_total[5m])) by (service) / sum(rate(http_client_requests_total[5m])) by (service) > 0.3"
    );
    assert_eq!(
        (high["for"].as_str(), high["labels"]["severity"].as_str()),
        (Some("2m"), Some("warning"))
    );
    let open = alert("CircuitBreakerOpen");
    assert_eq!(
        squash(&open["expr"]),
        "max by (service) (circuit_breaker_state) == 2",
        "one alert per service, not per daemon replica"
    );
    assert_eq!(
        (open["for"].as_str(), open["labels"]["severity"].as_str()),
        (Some("1m"), Some("critical"))
    );
    let amplification = alert("RequestAmplification");
    assert_eq!(
        squash(&amplification["expr"]),
        "sum(rate(http_server_requests_total[1m])) by (service) / sum(rate(http_server_requests_total[1m] offset 5m)) by (service) > 5 \
         and on (service) sum(rate(http_server_requests_total[1m] offset 5m)) by (service) >= 1",
        "the published ratio, and 1 request a second or more 5 minutes earlier"
    );
    assert_eq!(
        (
            amplification["for"].as_str(),
            amplification["labels"]["severity"].as_str()
        ),
        (Some("2m"), Some("critical"))
    );
}

#[test]
fn every_alert_has_severity_annotations_a_runbook_and_a_promtool_test() {
    let tests = std::fs::read_to_string("alerts/stormguard.rules_test.yaml").unwrap();
    let alerts: Vec<Yaml> = rules().into_iter().filter(|r| r["alert"].is_string()).collect();
    assert!(alerts.len() >= 7);
    for rule in alerts {
        let name = rule["alert"].as_str().unwrap();
        assert!(
            ["warning", "critical"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: severity"
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(rule["annotations"][key].is_string(), "{name}: {key}");
        }
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        let page = url
            .split("/blob/main/")
            .nth(1)
            .unwrap_or_else(|| panic!("{name}: {url}"));
        assert!(Path::new(page).is_file(), "{name}: runbook {page} missing");
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "{name} has no promtool test"
        );
    }
}

/// promtool, or why it is missing: under CI a missing program fails the test.
fn promtool() -> Option<&'static str> {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return Some("promtool");
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "promtool is missing under CI: .ci/run installs Debian's prometheus package"
    );
    eprintln!("SKIPPED: promtool is not installed (apt-get install -y prometheus); CI runs this test");
    None
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = promtool() else { return };
    for args in [
        ["check", "rules", "alerts/stormguard.rules.yaml"],
        ["test", "rules", "alerts/stormguard.rules_test.yaml"],
    ] {
        let out = Command::new(promtool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_panel_is_described_with_units_and_the_datasource_variable() {
    for path in DASHBOARDS {
        let dashboard = json(path);
        let variables: Vec<&str> = dashboard["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert!(variables.contains(&"datasource"), "{path}");
        let mut ids = std::collections::HashSet::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap();
            assert!(
                ids.insert(panel["id"].as_u64().unwrap()),
                "{path}: duplicate id at {title}"
            );
            if panel["type"] == "row" {
                continue;
            }
            assert!(
                panel["description"].as_str().is_some_and(|d| d.len() > 20),
                "{path} {title}: description"
            );
            assert!(
                panel["fieldConfig"]["defaults"]["unit"].is_string(),
                "{path} {title}: unit"
            );
            assert!(
                panel["fieldConfig"]["defaults"]["thresholds"]["steps"].is_array(),
                "{path} {title}: thresholds"
            );
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{path} {title}");
            for target in panel["targets"].as_array().unwrap() {
                assert_eq!(target["datasource"]["uid"], "${datasource}", "{path} {title}");
                if target["expr"].as_str().unwrap().contains("$service") {
                    assert!(variables.contains(&"service"), "{path} {title} uses $service");
                }
            }
        }
    }
}

#[test]
fn the_deploy_base_matches_the_files_it_copies() {
    assert_eq!(
        std::fs::read_to_string("deploy/base/retry-policy.yaml").unwrap(),
        std::fs::read_to_string("policies/retry-policy.yaml").unwrap(),
        "deploy/base/retry-policy.yaml must be a copy of policies/retry-policy.yaml"
    );
    assert_eq!(
        yaml("deploy/base/prometheusrule.yaml")["spec"]["groups"],
        yaml("alerts/stormguard.rules.yaml")["groups"],
        "the PrometheusRule must carry alerts/stormguard.rules.yaml's groups"
    );
    let kustomization = yaml("deploy/base/kustomization.yaml");
    for resource in kustomization["resources"].as_sequence().unwrap() {
        assert!(
            Path::new("deploy/base")
                .join(resource.as_str().unwrap())
                .is_file(),
            "{resource:?}"
        );
    }
}

#[test]
fn the_deployment_is_hardened_and_uses_real_flags() {
    let deployment = yaml("deploy/base/deployment.yaml");
    let spec = &deployment["spec"];
    assert!(spec["replicas"].as_u64().unwrap() >= 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], Yaml::Bool(true));
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"],
        Yaml::Bool(true)
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        Yaml::Bool(false)
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert!(container["resources"]["limits"]["memory"].is_string());
    for mount in container["volumeMounts"].as_sequence().unwrap() {
        assert!(
            mount.get("subPath").is_none(),
            "a subPath mount never sees ConfigMap updates"
        );
    }
    let volumes = pod["volumes"].as_sequence().unwrap();
    assert!(
        volumes.iter().any(|v| v["secret"]["secretName"].is_string()),
        "the admin token comes from a Secret"
    );

    let help = Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for arg in container["args"].as_sequence().unwrap().iter().skip(1) {
        let flag = arg.as_str().unwrap().split('=').next().unwrap();
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag} <")),
            "{flag} is not a serve flag"
        );
    }
}
