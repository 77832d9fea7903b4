#!/usr/bin/env python3
"""Validates deploy/ as users apply it: deploy/base, and deploy/base with the
components, rendered as `kubectl apply -k` does; every manifest applied on
its own as `kubectl apply -f` reads it (the base's files, the secure
component's certificates and its example issuer ConfigMap, the example
client). Kubernetes objects go against the Kubernetes API schemas of
several versions (kubernetes-validate --strict); prometheus-operator's and
cert-manager's objects against their CRD schemas
(@kubernetes-models/prometheus-operator and @kubernetes-models/cert-manager,
run by node), and against unknown fields, which `kubectl apply` refuses and
those schemas let through.

kustomize itself is not installable on CI (it comes from GitHub), so the
kustomizations are rendered here for the features they use: resources
(files and directories), components, namespace, labels with selectors, a
configMapGenerator without name hash, images, and patches (strategic-merge
patches of Deployments, JSON 6902 patches with a target). A kustomization
using anything else stops the script. With --against-kubectl each rendering
is compared with `kubectl kustomize`'s.

Usage: .ci/validate-manifests.py NODE_MODULES_DIR [--against-kubectl]
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

BASE = "deploy/base"
# What users render with `kubectl apply -k`: a directory, or a kustomization
# written here (paths relative to the repository), for combinations no
# directory holds.
RENDERINGS = {
    "deploy/base": BASE,
    "deploy/overlays/secure": "deploy/overlays/secure",
    "base + kube-prometheus-stack + secure components": {
        "resources": [BASE],
        "components": ["deploy/components/kube-prometheus-stack", "deploy/components/secure"],
    },
    "base + shared-pace component": {
        "resources": [BASE],
        "components": ["deploy/components/shared-pace"],
    },
}
# Manifests users apply on their own, besides the base's resources.
APPLIED = [
    "deploy/components/secure/certificates.yaml",
    "deploy/components/secure/token-issuer.yaml",
    "deploy/components/shared-pace/pace-store-secret.yaml",
    "deploy/examples/client-with-token.yaml",
]
VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]
# Custom resources, by kind: their model in node_modules (the .js module
# exports the class named as the kind; the .d.ts declares its fields).
CRDS = {
    "ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
    "PrometheusRule": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule",
    "Certificate": "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate",
    "Issuer": "@kubernetes-models/cert-manager/cert-manager.io/v1/Issuer",
}
CLUSTER_KINDS = {"Namespace"}
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "components",
                      "configMapGenerator", "images", "patches"}


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

# Lists of the Kubernetes types that a strategic-merge patch merges item by
# item, by this key. Any other list is replaced here; kustomize merges a few
# more (a container's ports, for one): add them when a patch needs them.
# Every list of a custom resource is replaced, as kustomize does not know
# its schema.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "volumeMounts": "mountPath"}


def group(obj):
    return obj["apiVersion"].rpartition("/")[0]


def builtin(obj):
    return "." not in group(obj) or group(obj).endswith(".k8s.io")


def merge(into, patch, lists_by_key):
    """Applies the strategic-merge patch `patch` to `into`, as kustomize does:
    maps merge, null deletes, items new to a merged list come first."""
    for field, value in patch.items():
        if field.startswith("$"):
            raise ValueError(f"strategic-merge directive {field} is not rendered here")
        if value is None:
            into.pop(field, None)
        elif isinstance(value, dict) and isinstance(into.get(field), dict):
            merge(into[field], value, lists_by_key)
        elif lists_by_key and field in MERGE_KEYS and isinstance(value, list) and isinstance(into.get(field), list):
            by = MERGE_KEYS[field]
            old = {item[by]: item for item in into[field]}
            new = []
            for item in value:
                if item[by] in old:
                    merge(old[item[by]], item, lists_by_key)
                else:
                    new.append(copy.deepcopy(item))
            into[field] = new + into[field]
        else:
            into[field] = copy.deepcopy(value)


def json_patch(obj, ops):
    """Applies JSON 6902 `add`, `replace` and `remove` operations to `obj`."""
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at = obj
        for part in parents:
            at = at[int(part)] if isinstance(at, list) else at[part]
        if op["op"] not in ("add", "replace", "remove"):
            raise ValueError(f"JSON patch op {op['op']} is not rendered here")
        if isinstance(at, list):
            index = len(at) if last == "-" else int(last)
            if op["op"] == "add":
                at.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                at[index] = copy.deepcopy(op["value"])
            else:
                del at[index]
        else:
            if op["op"] != "add" and last not in at:
                raise ValueError(f"{op['op']} {op['path']}: nothing there in {key(obj)}")
            if op["op"] == "remove":
                del at[last]
            else:
                at[last] = copy.deepcopy(op["value"])


def selected(obj, target):
    """Whether `obj` is one of a patch's target (each field a regular expression, as in kustomize)."""
    fields = {"group": group(obj), "version": obj["apiVersion"].rpartition("/")[2], "kind": obj["kind"],
              "name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", "")}
    unknown = set(target) - set(fields)
    if unknown:
        raise ValueError(f"patch target {sorted(unknown)} is not rendered here")
    return all(re.fullmatch(pattern, fields[field]) for field, pattern in target.items())


def patch(objects, directory, entry):
    if "path" in entry:
        with open(os.path.join(directory, entry["path"])) as f:
            body = yaml.safe_load(f)
    else:
        body = yaml.safe_load(entry["patch"])
    if isinstance(body, list):
        targets = [o for o in objects if selected(o, entry["target"])]
        for obj in targets:
            json_patch(obj, body)
    else:
        target = entry.get("target") or {"kind": body["kind"], "name": body["metadata"]["name"]}
        targets = [o for o in objects if o["apiVersion"] == body["apiVersion"] and selected(o, target)]
        for obj in targets:
            merge(obj, body, builtin(obj))
    if not targets:
        raise ValueError(f"{directory}: a patch matches nothing: {entry}")


def accumulate(directory, k, out):
    """Renders the kustomization (or component) `k` of `directory` onto the
    objects `out` in kustomize's order: resources, components, generators,
    then transformers (patches, namespace, labels, images)."""
    unknown = set(k) - KUSTOMIZATION_KEYS
    if unknown:
        raise ValueError(f"{directory}: {sorted(unknown)} is not rendered here")
    for resource in k.get("resources", []):
        path = os.path.join(directory, resource)
        if os.path.isdir(path):
            out.extend(render(path))
        else:
            out.extend(docs(path))
    for component in k.get("components", []):
        path = os.path.join(directory, component)
        accumulate(path, kustomization(path), out)
    for generator in k.get("configMapGenerator", []):
        if not generator.get("options", {}).get("disableNameSuffixHash"):
            raise ValueError(f"{directory}: the name hash of {generator['name']} is not rendered here")
        data = {}
        for name in generator["files"]:
            with open(os.path.join(directory, name)) as f:
                data[name] = f.read()
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    for entry in k.get("patches", []):
        patch(out, directory, entry)
    for obj in out:
        meta = obj["metadata"]
        if "namespace" in k and obj["kind"] not in CLUSTER_KINDS:
            meta["namespace"] = k["namespace"]
        for labels in k.get("labels", []):
            put(obj, ["metadata", "labels"], labels["pairs"])
            if labels.get("includeSelectors"):
                for path in SELECTORS.get(obj["kind"], []):
                    put(obj, path, labels["pairs"])
        for container in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for image in k.get("images", []):
                if container["image"] == image["name"]:
                    container["image"] = f"{image['newName']}:{image['newTag']}"
    return out


def kustomization(directory):
    return docs(os.path.join(directory, "kustomization.yaml"))[0]


def render(source):
    """The objects `kubectl kustomize` makes of `source`: a directory, or a
    kustomization with paths relative to the repository."""
    if isinstance(source, dict):
        return accumulate(".", source, [])
    return accumulate(source, kustomization(source), [])


def kubectl_kustomize(source):
    if isinstance(source, dict):
        with tempfile.TemporaryDirectory() as tmp:
            relative = {field: [os.path.relpath(p, tmp) for p in paths] for field, paths in source.items()}
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                yaml.safe_dump(relative, f)
            return kubectl_kustomize(tmp)
    return [d for d in yaml.safe_load_all(subprocess.check_output(["kubectl", "kustomize", source])) if d]


def key(obj):
    return (obj["kind"], obj["metadata"]["name"])


def wiring(objects):
    """What no schema sees in a rendering with the secure component: the
    names, keys and paths that tie the daemon, its certificate, the
    ServiceMonitor, the example issuer ConfigMap and the example client
    together agree. Returns the disagreements."""
    by = {key(o): o for o in objects}
    problems = []

    def need(ok, what):
        if not ok:
            problems.append(what)

    def container_files(pod, name):
        """The container's env (by name) and, for a file path, the volume it is in and its file name."""
        container = next(c for c in pod["containers"] if c["name"] == name)
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}

        def volume(path):
            directory, _, file = path.rpartition("/")
            return volumes.get(mounts.get(directory), {}), file
        return {e["name"]: e for e in container.get("env", [])}, volume, container

    pod = by[("Deployment", "stormguard")]["spec"]["template"]["spec"]
    env, volume, container = container_files(pod, "stormguard")
    service = by[("Service", "stormguard")]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    need(service["spec"]["ports"][0].get("appProtocol") == "https", "Service: appProtocol is not https")
    for probe in ("readinessProbe", "livenessProbe"):
        need(container[probe].get("httpGet", {}).get("scheme") == "HTTPS", f"daemon: {probe} is not HTTPS")

    # TLS: the files are the keys cert-manager writes into the Certificate's Secret.
    certificates = {o["spec"]["secretName"]: o for o in objects if o["kind"] == "Certificate"}
    tls_secret = None
    for variable, file in (("STORMGUARD_TLS_CERT", "tls.crt"), ("STORMGUARD_TLS_KEY", "tls.key")):
        mounted, found = volume(env.get(variable, {}).get("value", ""))
        tls_secret = mounted.get("secret", {}).get("secretName")
        need(found == file and tls_secret in certificates,
             f"daemon: {variable} is not {file} of a Secret a Certificate writes")
    names = certificates[tls_secret]["spec"].get("dnsNames", []) if tls_secret in certificates else []
    for dns in (name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"):
        need(dns in names or tls_secret not in certificates,
             f"Certificate of {tls_secret}: {dns} is not among its dnsNames")
    issuers = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Issuer"}
    for cert in certificates.values():
        issuer = issuers.get(cert["spec"]["issuerRef"]["name"])
        need(issuer is not None, f"Certificate {cert['metadata']['name']}: no Issuer {cert['spec']['issuerRef']['name']}")
        ca = (issuer or {}).get("spec", {}).get("ca")
        need(ca is None or certificates.get(ca["secretName"], {}).get("spec", {}).get("isCA"),
             f"Issuer {cert['spec']['issuerRef']['name']}: its CA Secret is no CA Certificate's")

    # Tokens: the keys file and the issuer come from the example ConfigMap.
    example = docs("deploy/components/secure/token-issuer.yaml")[0]
    need(env.get("STORMGUARD_TOKENS", {}).get("value") == "required", "daemon: STORMGUARD_TOKENS is not required")
    mounted, found = volume(env.get("STORMGUARD_TOKEN_KEYS", {}).get("value", ""))
    need(mounted.get("configMap", {}).get("name") == example["metadata"]["name"] and found in example["data"],
         f"daemon: STORMGUARD_TOKEN_KEYS is no key of the ConfigMap {example['metadata']['name']}")
    try:
        jwks = json.loads(example["data"].get(found, "{}"))
    except ValueError:
        jwks = None
    need(isinstance(jwks, dict) and isinstance(jwks.get("keys"), list),
         f"ConfigMap {example['metadata']['name']}: {found} is not a JSON Web Key Set")
    ref = env.get("STORMGUARD_TOKEN_ISSUER", {}).get("valueFrom", {}).get("configMapKeyRef", {})
    need(ref.get("name") == example["metadata"]["name"] and ref.get("key") in example["data"],
         f"daemon: STORMGUARD_TOKEN_ISSUER is no key of the ConfigMap {example['metadata']['name']}")
    audience = env.get("STORMGUARD_TOKEN_AUDIENCE", {}).get("value", "stormguard")

    # Prometheus scrapes over HTTPS, trusting the CA, checking a name the certificate has.
    for endpoint in by[("ServiceMonitor", "stormguard")]["spec"]["endpoints"]:
        tls = endpoint.get("tlsConfig", {})
        need(endpoint.get("scheme") == "https", "ServiceMonitor: scheme is not https")
        need(tls.get("serverName") in names, "ServiceMonitor: serverName is not among the certificate's dnsNames")
        need(tls.get("ca", {}).get("secret") == {"name": tls_secret, "key": "ca.crt"},
             f"ServiceMonitor: the CA is not ca.crt of the Secret {tls_secret}")

    # The example client reaches the Service by a name of the certificate,
    # sends a token for the daemon's audience, and trusts a ca.crt.
    client = {d["kind"]: d for d in docs("deploy/examples/client-with-token.yaml")}
    client_pod = client["Deployment"]["spec"]["template"]["spec"]
    client_env, client_volume, _ = container_files(client_pod, "checkout")
    need(client_pod.get("serviceAccountName") == client["ServiceAccount"]["metadata"]["name"],
         "client: the pod does not run as the example's ServiceAccount")
    url = re.fullmatch(r"https://([^:/]+):(\d+)", client_env["STORMGUARD_DAEMON"]["value"])
    need(url and url[1] in names and int(url[2]) == service["spec"]["ports"][0]["port"],
         "client: STORMGUARD_DAEMON is not https:// a name of the certificate and the Service's port")
    mounted, found = client_volume(client_env["STORMGUARD_TOKEN_FILE"]["value"])
    tokens = [s["serviceAccountToken"] for s in mounted.get("projected", {}).get("sources", [])
              if "serviceAccountToken" in s]
    need(any(t["path"] == found and t.get("audience") == audience for t in tokens),
         f"client: STORMGUARD_TOKEN_FILE is no projected token for the audience {audience}")
    mounted, found = client_volume(client_env["STORMGUARD_CA_FILE"]["value"])
    need("configMap" in mounted and found == "ca.crt", "client: STORMGUARD_CA_FILE is not ca.crt of a ConfigMap")
    return problems


def pace_store_wiring(objects):
    """In a rendering with the shared-pace component: the daemon's pace store
    address and password come from keys of the example Secret, and the
    address is a Redis URL without a password in it. Returns the
    disagreements."""
    secret = docs("deploy/components/shared-pace/pace-store-secret.yaml")[0]
    pod = next(o for o in objects if key(o) == ("Deployment", "stormguard"))["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "stormguard")
    env = {e["name"]: e for e in container.get("env", [])}
    problems = []
    for variable, field in (("STORMGUARD_PACE_STORE", "url"), ("STORMGUARD_PACE_STORE_PASSWORD", "password")):
        ref = env.get(variable, {}).get("valueFrom", {}).get("secretKeyRef", {})
        if ref.get("name") != secret["metadata"]["name"] or ref.get("key") != field or field not in secret["stringData"]:
            problems.append(f"daemon: {variable} is not {field} of the Secret {secret['metadata']['name']}")
    if not re.fullmatch(r"redis://([^:@/]+@)?[^:@/]+(:\d+)?(/\d+)?", secret["stringData"]["url"]):
        problems.append("Secret stormguard-pace-store: url is not redis://HOST:PORT[/DB] without a password")
    return problems


def validate(paths, version):
    result = subprocess.run(
        ["kubernetes-validate", "--strict", "--quiet", "-k", version, *paths], capture_output=True, text=True
    )
    return result.returncode, (result.stdout + result.stderr).strip()


def main():
    node_modules = sys.argv[1]
    failed = False
    rendered = {label: render(source) for label, source in RENDERINGS.items()}
    if "--against-kubectl" in sys.argv:
        for label, source in RENDERINGS.items():
            theirs = {key(d): d for d in kubectl_kustomize(source)}
            ours = {key(d): d for d in rendered[label]}
            if theirs != ours:
                print(f"{label}: rendering differs from kubectl kustomize:", sorted(set(theirs) ^ set(ours)) or
                      [k for k in ours if ours[k] != theirs.get(k)])
                failed = True
            else:
                print(f"{label}: the same objects as kubectl kustomize")
    for label, objects in rendered.items():
        if any(o["kind"] == "Certificate" for o in objects):
            problems = wiring(objects)
            print(f"{label}: names, keys and paths {'agree' if not problems else 'DISAGREE'}"
                  " (daemon, certificate, ServiceMonitor, issuer ConfigMap, example client)")
            for problem in problems:
                print(f"  {problem}")
            failed |= bool(problems)
        if any(e.get("name") == "STORMGUARD_PACE_STORE"
               for o in objects if key(o) == ("Deployment", "stormguard")
               for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])):
            problems = pace_store_wiring(objects)
            print(f"{label}: pace store {'agrees' if not problems else 'DISAGREES'} (daemon, example Secret)")
            for problem in problems:
                print(f"  {problem}")
            failed |= bool(problems)
    applied = [os.path.join(BASE, r) for r in kustomization(BASE)["resources"]] + APPLIED
    # Every custom resource, with where it comes from.
    custom = [[label, obj] for label, objects in rendered.items() for obj in objects if obj["kind"] in CRDS]
    custom += [[f"kubectl apply -f {p}", d] for p in applied for d in docs(p) if d["kind"] in CRDS]
    with tempfile.TemporaryDirectory() as tmp:
        checks = []
        for n, (label, objects) in enumerate(rendered.items()):
            paths = []
            for i, obj in enumerate(objects):
                if obj["kind"] not in CRDS:
                    paths.append(os.path.join(tmp, f"{n}-{i}-{obj['kind']}.yaml"))
                    with open(paths[-1], "w") as f:
                        yaml.safe_dump(obj, f)
            checks.append((f"{label}, as kubectl apply -k", paths))
        checks.append(("as kubectl apply -f", [p for p in applied if all(d["kind"] not in CRDS for d in docs(p))]))
        for version in VERSIONS:
            for label, paths in checks:
                code, text = validate(paths, version)
                print(f"Kubernetes {version}: {label}: {'valid' if code == 0 else 'INVALID'}")
                if code != 0:
                    print(text)
                    failed = True
        script = os.path.join(tmp, "crd.mjs")
        with open(script, "w") as f:
            f.write(CRD_CHECK)
        env = dict(os.environ, NODE_PATH=node_modules)
        result = subprocess.run(["node", script, node_modules, json.dumps(CRDS)], input=json.dumps(custom),
                                capture_output=True, text=True, env=env)
        print("\n".join(text for text in (result.stdout.strip(), result.stderr.strip()) if text))
        failed |= result.returncode != 0
    return 1 if failed else 0


# Each custom resource through its model's validate() (the CRD's OpenAPI
# schema: types, enums, required fields, patterns), then against the fields
# its model's type declarations name: the CRD schemas carry no
# additionalProperties, so a misspelt field passes validate() and is only
# refused by the API server's strict field validation, at `kubectl apply`.
CRD_CHECK = r"""
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
const [base, crds] = [process.argv[2], JSON.parse(process.argv[3])];

// The fields of the interface a .d.ts file declares (with those of the
// interfaces it extends), each with its type and the file's imports; null
// when the file declares a type that is not an object (an enum, a string).
const shapes = new Map();
function shape(file) {
  if (shapes.has(file)) return shapes.get(file);
  const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const imports = {};
  for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
    imports[m[1]] = m[2].startsWith(".") ? path.resolve(path.dirname(file), m[2]) : path.join(base, m[2]);
    imports[m[1]] = imports[m[1]].replace(/\.js$/, "") + ".d.ts";
  }
  const head = /export interface \w+(?: extends ([^{]+))? \{/.exec(text);
  if (!head) return shapes.set(file, null).get(file);
  const fields = {};
  for (const parent of (head[1] || "").split(",").map((s) => s.trim()).filter(Boolean)) {
    if (parent === "TypeMeta") continue; // apiVersion and kind, which every model declares itself
    if (!imports[parent]) throw new Error(`${file}: cannot resolve ${parent}`);
    Object.assign(fields, shape(imports[parent]).fields);
  }
  // The body's members: split at `;` outside braces and angle brackets.
  let depth = 0, member = "";
  for (const c of text.slice(head.index + head[0].length)) {
    if (depth === 0 && c === "}") break;
    if ("{<".includes(c)) depth++;
    if ("}>".includes(c)) depth--;
    if (depth === 0 && c === ";") {
      const m = /^\s*"([^"]+)"\??:\s*([\s\S]*)$/.exec(member);
      if (m) fields[m[1]] = { type: m[2].trim(), imports };
      member = "";
    } else member += c;
  }
  return shapes.set(file, { fields }).get(file);
}

function unknownFields(value, type, imports, at, out) {
  let m;
  if ((m = /^Array<([\s\S]*)>$/.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, m[1].trim(), imports, `${at}/${i}`, out));
  } else if ((m = /^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/.exec(type))) {
    if (value && typeof value === "object") for (const k in value) unknownFields(value[k], m[1].trim(), imports, `${at}/${k}`, out);
  } else if (/^\w+$/.test(type) && imports[type]) {
    const s = shape(imports[type]);
    if (!s || !value || typeof value !== "object" || Array.isArray(value)) return;
    for (const k in value) {
      if (!(k in s.fields)) out.push(`${at}/${k}: unknown field`);
      else unknownFields(value[k], s.fields[k].type, s.fields[k].imports, `${at}/${k}`, out);
    }
  }
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = false;
for (const [where, obj] of JSON.parse(input)) {
  const model = path.join(base, crds[obj.kind]);
  const Model = (await import(pathToFileURL(model + ".js").href))[obj.kind];
  const errors = [];
  try {
    new Model(obj).validate();
  } catch (e) {
    errors.push(e.message);
  }
  unknownFields(obj, "Root", { Root: model + ".d.ts" }, "", errors);
  failed ||= errors.length > 0;
  const what = `${where}: ${obj.kind} ${obj.metadata.name}`;
  console.log(errors.length ? `${what}: INVALID: ${errors.join("; ")}` : `${what}: valid against its CRD schema, no unknown fields`);
}
process.exit(failed ? 1 : 0);
"""

if __name__ == "__main__":
    sys.exit(main())
