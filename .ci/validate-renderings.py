#!/usr/bin/env python3
"""Checks `stormguard render` against each system's own parser or schema, for
every service of the bundled policy files (and one that gets the defaults):

- gRPC: the C core's own parsing of a channel's default service config
  (grpcio): a config it refuses fails the first call with INVALID_ARGUMENT;
- Envoy: the v3 API's types (envoy-data-plane): RouteAction and Cluster
  refuse unknown fields and wrong types;
- Istio: the CRDs' OpenAPI schemas (@kubernetes-models/istio, run by node);
- Linkerd: no schema of its annotations can be had from the registries this
  runs with, so the annotations are checked against the names and value
  forms Linkerd documents.

Usage: .ci/validate-renderings.py BINARY NODE_MODULES_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import grpc
import yaml
from envoy_data_plane.envoy.config.cluster.v3 import Cluster
from envoy_data_plane.envoy.config.route.v3 import RouteAction

POLICIES = ["policies/retry-policy.yaml", "policies/full-example.yaml"]
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
LINKERD = {
    "retry.linkerd.io/http": re.compile(r"^(5xx|gateway-error|[1-5][0-9][0-9](-[1-5][0-9][0-9])?)(,(5xx|gateway-error|[1-5][0-9][0-9](-[1-5][0-9][0-9])?))*$"),
    "retry.linkerd.io/limit": re.compile(r"^[0-9]+$"),
    "retry.linkerd.io/timeout": GO_DURATION,
    "timeout.linkerd.io/request": GO_DURATION,
    "balancer.linkerd.io/failure-accrual": re.compile(r"^consecutive$"),
    "balancer.linkerd.io/failure-accrual-consecutive-max-failures": re.compile(r"^[1-9][0-9]*$"),
    "balancer.linkerd.io/failure-accrual-consecutive-min-penalty": GO_DURATION,
}


def rendering(binary, policy, service, fmt):
    out = subprocess.check_output([binary, "render", "--format", fmt, "--service", service, "--policy", policy,
                                   "--namespace", "shop", "--json"])
    return json.loads(out)["document"]


def check_grpc(document):
    options = [("grpc.service_config", json.dumps(document)), ("grpc.enable_retries", 1)]
    with grpc.insecure_channel("127.0.0.1:1", options=options) as channel:
        try:
            channel.unary_unary("/stormguard.Check/Call")(b"", timeout=2)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
                return f"refused: {error.details()}"
    return None


def check_envoy(document):
    cluster = json.loads(json.dumps(document["cluster"]))
    # envoy-data-plane's from_dict cannot read OutlierDetection's
    # consecutive_5xx under any spelling (its name conversion looks for
    # "consecutive5_xx"), so that one field is set on the message directly
    # and serialized, which checks its type.
    consecutive = cluster.get("outlierDetection", {}).pop("consecutive5xx", None)
    try:
        RouteAction().from_dict(document["route"])
        parsed = Cluster().from_dict(cluster)
        if consecutive is not None:
            parsed.outlier_detection.consecutive_5xx = consecutive
        bytes(parsed)
    except Exception as error:  # the types raise KeyError, TypeError or ValueError
        return f"refused: {error!r}"
    return None


def check_linkerd(document):
    annotations = document["metadata"]["annotations"]
    for key, value in annotations.items():
        form = LINKERD.get(key)
        if form is None:
            return f"unknown annotation {key}"
        if not isinstance(value, str) or not form.match(value):
            return f"{key}: {value!r} is not what Linkerd reads"
    return None


ISTIO_CHECK = r"""
import path from "node:path";
import { pathToFileURL } from "node:url";
const base = process.argv[2];
const load = (p) => import(pathToFileURL(path.join(base, "@kubernetes-models/istio/networking.istio.io/v1", p)).href);
const models = {
  VirtualService: (await load("VirtualService.js")).VirtualService,
  DestinationRule: (await load("DestinationRule.js")).DestinationRule,
};
let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = 0;
for (const [label, obj] of JSON.parse(input)) {
  try { new models[obj.kind](obj).validate(); }
  catch (e) { failed++; console.log(`${label}: ${obj.kind} INVALID: ${e.message}`); }
}
process.exit(failed ? 1 : 0);
"""


def main():
    binary, node_modules = sys.argv[1], sys.argv[2]
    failures = []
    istio = []
    checked = 0
    for policy in POLICIES:
        with open(policy) as f:
            services = list((yaml.safe_load(f).get("services") or {}).keys()) + ["not-listed"]
        for service in services:
            label = f"{policy} {service}"
            for fmt, check in [("grpc", check_grpc), ("envoy", check_envoy), ("linkerd", check_linkerd)]:
                problem = check(rendering(binary, policy, service, fmt))
                checked += 1
                if problem:
                    failures.append(f"{label} {fmt}: {problem}")
            for obj in rendering(binary, policy, service, "istio"):
                istio.append([label, obj])
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "istio.mjs")
        with open(script, "w") as f:
            f.write(ISTIO_CHECK)
        result = subprocess.run(["node", script, node_modules], input=json.dumps(istio), capture_output=True, text=True)
        if result.returncode != 0:
            failures.append(result.stdout.strip() or result.stderr.strip())
    print(f"{checked} gRPC, Envoy and Linkerd renderings and {len(istio)} Istio objects checked")
    for failure in failures:
        print("FAILED", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
