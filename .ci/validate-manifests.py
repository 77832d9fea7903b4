#!/usr/bin/env python3
"""Validates deploy/base as users apply it: every manifest as `kubectl apply -f`
reads it, and the base rendered as `kubectl apply -k` does, against the
Kubernetes API schemas of several versions (kubernetes-validate --strict),
and the prometheus-operator objects against that operator's CRD schemas
(@kubernetes-models/prometheus-operator, run by node).

kustomize itself is not installable on CI (it comes from GitHub), so the
base is rendered here for the four features its kustomization uses:
namespace, labels with selectors, a configMapGenerator and an image. With
--against-kubectl the rendering is compared with `kubectl kustomize`'s.

Usage: .ci/validate-manifests.py NODE_MODULES_DIR [--against-kubectl]
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

BASE = "deploy/base"
VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
CLUSTER_KINDS = {"Namespace"}


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def put(obj, path, labels):
    """Adds `labels` to the map at `path` in `obj` (a list of keys; "*" walks a list)."""
    if not path:
        obj.update(labels)
        return
    key, rest = path[0], path[1:]
    if key == "*":
        for item in obj or []:
            put(item, rest, labels)
        return
    if rest or key not in obj:
        obj.setdefault(key, {} if rest[:1] != ["*"] else [])
    put(obj[key], rest, labels)


SELECTORS = {
    "Deployment": [
        ["spec", "selector", "matchLabels"],
        ["spec", "template", "metadata", "labels"],
        ["spec", "template", "spec", "topologySpreadConstraints", "*", "labelSelector", "matchLabels"],
    ],
    "Service": [["spec", "selector"]],
    "PodDisruptionBudget": [["spec", "selector", "matchLabels"]],
}


def render(base):
    k = docs(os.path.join(base, "kustomization.yaml"))[0]
    out = []
    for resource in k["resources"]:
        out.extend(docs(os.path.join(base, resource)))
    for generator in k.get("configMapGenerator", []):
        data = {}
        for name in generator["files"]:
            with open(os.path.join(base, name)) as f:
                data[name] = f.read()
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    for obj in out:
        meta = obj["metadata"]
        if obj["kind"] not in CLUSTER_KINDS:
            meta["namespace"] = k["namespace"]
        for group in k.get("labels", []):
            put(obj, ["metadata", "labels"], group["pairs"])
            if group.get("includeSelectors"):
                for path in SELECTORS.get(obj["kind"], []):
                    put(obj, path, group["pairs"])
        for container in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for image in k.get("images", []):
                if container["image"] == image["name"]:
                    container["image"] = f"{image['newName']}:{image['newTag']}"
    return out


def key(obj):
    return (obj["kind"], obj["metadata"]["name"])


def validate(paths, version):
    result = subprocess.run(
        ["kubernetes-validate", "--strict", "--quiet", "-k", version, *paths], capture_output=True, text=True
    )
    return result.returncode, (result.stdout + result.stderr).strip()


def main():
    node_modules = sys.argv[1]
    rendered = render(BASE)
    failed = False
    if "--against-kubectl" in sys.argv:
        theirs = {key(d): d for d in yaml.safe_load_all(subprocess.check_output(["kubectl", "kustomize", BASE])) if d}
        ours = {key(d): d for d in rendered}
        if theirs != ours:
            print("rendering differs from kubectl kustomize:", sorted(set(theirs) ^ set(ours)) or
                  [k for k in ours if ours[k] != theirs.get(k)])
            failed = True
        else:
            print("rendering: the same objects as kubectl kustomize")
    with tempfile.TemporaryDirectory() as tmp:
        core, operator = [], []
        for i, obj in enumerate(rendered):
            path = os.path.join(tmp, f"{i}-{obj['kind']}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(obj, f)
            (operator if obj["kind"] in OPERATOR_KINDS else core).append(path)
        raw = [os.path.join(BASE, r) for r in docs(os.path.join(BASE, "kustomization.yaml"))[0]["resources"]]
        raw_core = [p for p in raw if docs(p)[0]["kind"] not in OPERATOR_KINDS]
        for version in VERSIONS:
            for label, paths in [("kubectl apply -k", core), ("kubectl apply -f", raw_core)]:
                code, text = validate(paths, version)
                print(f"Kubernetes {version}, as {label}: {'valid' if code == 0 else 'INVALID'}")
                if code != 0:
                    print(text)
                    failed = True
        script = os.path.join(tmp, "crd.mjs")
        with open(script, "w") as f:
            f.write(CRD_CHECK)
        env = dict(os.environ, NODE_PATH=node_modules)
        objects = json.dumps([o for o in rendered if o["kind"] in OPERATOR_KINDS] +
                             [d for p in raw if docs(p)[0]["kind"] in OPERATOR_KINDS for d in docs(p)])
        result = subprocess.run(["node", script, node_modules], input=objects, capture_output=True, text=True, env=env)
        print(result.stdout.strip() or result.stderr.strip())
        failed |= result.returncode != 0
    return 1 if failed else 0


CRD_CHECK = r"""
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
const base = process.argv[2];
const load = (p) => import(pathToFileURL(path.join(base, "@kubernetes-models/prometheus-operator", p)).href);
const { ServiceMonitor } = await load("monitoring.coreos.com/v1/ServiceMonitor.js");
const { PrometheusRule } = await load("monitoring.coreos.com/v1/PrometheusRule.js");
const models = { ServiceMonitor, PrometheusRule };
let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = false;
for (const obj of JSON.parse(input)) {
  try {
    new models[obj.kind](obj).validate();
    console.log(`${obj.kind} ${obj.metadata.name}: valid against the prometheus-operator CRD schema`);
  } catch (e) {
    failed = true;
    console.log(`${obj.kind} ${obj.metadata.name}: INVALID: ${e.message}`);
  }
}
process.exit(failed ? 1 : 0);
"""

if __name__ == "__main__":
    sys.exit(main())
