#!/usr/bin/env bash
# schemathesis against the real daemon: every operation of docs/openapi.yaml,
# every check schemathesis has, a fixed seed. Usage: .ci/schemathesis.sh BINARY
set -euo pipefail
binary="$1"
examples="${SCHEMATHESIS_EXAMPLES:-100}"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
work="$(mktemp -d)"
cp policies/full-example.yaml "$work/policy.yaml"
STORMGUARD_ADMIN_TOKEN="$token" "$binary" serve --policy "$work/policy.yaml" \
  --listen "127.0.0.1:$port" --max-wait 1s --shutdown-delay 0s >"$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.1
done
PYTHONPATH=.ci SCHEMATHESIS_HOOKS=schemathesis_hooks \
  schemathesis --config-file .ci/schemathesis.toml run docs/openapi.yaml --url "http://127.0.0.1:$port" \
  --checks all --seed 1 --max-examples "$examples" --workers 1 \
  --header "Authorization: Bearer $token" --request-timeout 10 \
  --generation-database none --no-color
