#!/usr/bin/env bash
# Report ingestion and scrape cost, on the real daemon over loopback.
#
#  1. wrk POSTs one report with 20 counters (5 endpoints x 3 statuses + 5
#     retry counts) to /v1/reports for DURATION seconds: reports/s, and every
#     answer must be 202. Then the same report ten times in one request, as
#     a process calling ten services sends them, and, for scale, the smallest
#     report (the cost of a POST itself).
#  2. 1000 services x 10 endpoints are reported, then /metrics is scraped 50
#     times: median and p99 scrape time and the exposition's size.
#
# Needs wrk and python3 (apt-get install -y wrk python3).
# Usage: bench/reports.sh [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNECTIONS=${2:-64}
for tool in wrk python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk python3" >&2; exit 1; }
done
cargo build --release --quiet
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
  local port; port=$(free_port)
  ./target/release/stormguard serve --listen "127.0.0.1:$port" "$@" 2>"$WORK/log" &
  PID=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
  BASE="http://127.0.0.1:$port"
}

python3 - "$WORK/report.json" <<'PY'
import json, sys
endpoints = [{"endpoint": f"/op{i}", "requests": {"success": 100, "error": 2, "server_error": 5},
              "retries": {"1": 7}} for i in range(5)]
report = {"service": "payment-service", "instance": "bench-pod", "endpoints": endpoints,
          "inFlight": 3, "circuitState": "closed", "budget": {"retriesDenied": 1, "remainingRatio": 0.8}}
open(sys.argv[1], "w").write(json.dumps(report))
batch = [dict(report, service=f"svc-{i}") for i in range(10)]
open(sys.argv[1].replace("report.json", "batch.json"), "w").write(json.dumps(batch))
open(sys.argv[1].replace("report.json", "empty.json"), "w").write(json.dumps({"service": "payment-service", "instance": "bench-pod"}))
PY
for body in report batch empty; do
  cat > "$WORK/$body.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open("$WORK/$body.json"):read("*a")
LUA
done

start --policy policies/retry-policy.yaml --max-unlisted-services 20
for body in report batch empty; do
  case $body in
    report) per=1; what="one report of 20 counters per request" ;;
    batch) per=10; what="ten reports of 20 counters per request" ;;
    empty) per=1; what="the smallest report, for the cost of a POST itself" ;;
  esac
  echo "== ingest: $what, $CONNECTIONS connections, ${DURATION}s"
  out=$(wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -s "$WORK/$body.lua" "$BASE/v1/reports")
  echo "$out" | grep -E "Latency|Non-2xx" || true
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  echo "requests/s $rps, reports/s $(python3 -c "print(round($rps * $per))")"
done
curl -s "$BASE/metrics" | grep -E '^stormguard_reports_total'
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=

echo "== scrape: 1000 services x 10 endpoints"
start --policy policies/retry-policy.yaml --max-unlisted-services 1000 --max-endpoints-per-service 10
python3 - "$BASE" <<'PY'
import json, statistics, sys, time, urllib.request
base = sys.argv[1]
for s in range(1000):
    endpoints = [{"endpoint": f"/op{e}", "requests": {"success": 10, "error": 1, "server_error": 1},
                  "retries": {"1": 2, "2": 1}} for e in range(10)]
    body = json.dumps({"service": f"svc-{s}", "instance": f"pod-{s}", "endpoints": endpoints,
                       "inFlight": 1, "circuitState": "closed"}).encode()
    req = urllib.request.Request(base + "/v1/reports", body, {"Content-Type": "application/json"})
    assert urllib.request.urlopen(req).status == 202
times, size = [], 0
for _ in range(50):
    start = time.perf_counter()
    text = urllib.request.urlopen(base + "/metrics").read()
    times.append((time.perf_counter() - start) * 1000)
    size = len(text)
series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
times.sort()
print(f"series {series}, exposition {size / 1e6:.1f} MB")
print(f"scrape ms: median {statistics.median(times):.1f}, p99 {times[int(0.99 * len(times))]:.1f}, max {times[-1]:.1f}")
PY
