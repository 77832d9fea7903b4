#!/usr/bin/env bash
# Side-by-side benchmark, in one run on one machine.
#
#  1. wrk against GET /v1/policies/payment-service on the daemon and against
#     nginx serving the very same JSON bytes as a static file, with the same
#     wrk threads, connections and duration, in alternating rounds; the
#     median requests/s of each and their ratio. Two layouts:
#       pinned: each server on CPU 1 with one worker, wrk on CPU 0 (low noise)
#       shared: each server with two workers, wrk beside it on both CPUs
#  2. reload latency over kubelet-style ConfigMap swaps (bench/reload_latency.py).
#
# Needs wrk, nginx, python3 and taskset (apt-get install -y wrk nginx-light python3 util-linux).
# Usage: bench/serve.sh [seconds-per-round] [connections] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNECTIONS=${2:-64}
ROUNDS=${3:-5}
for tool in wrk nginx python3 taskset bc; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk nginx-light python3 util-linux bc" >&2; exit 1; }
done

cargo build --release --quiet
WORK=$(mktemp -d)
chmod 755 "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
PATH_UNDER_TEST=/v1/policies/payment-service

# run_layout NAME CPUS WORKERS WRK_CPUS WRK_THREADS
run_layout() {
  local name=$1 cpus=$2 workers=$3 wrk_cpus=$4 wrk_threads=$5
  local daemon_port nginx_port
  daemon_port=$(free_port); nginx_port=$(free_port)
  taskset -c "$cpus" ./target/release/stormguard serve --workers "$workers" \
    --policy policies/retry-policy.yaml --listen "127.0.0.1:$daemon_port" 2>"$WORK/daemon-$name.log" &
  PIDS+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$daemon_port/readyz" >/dev/null && break; sleep 0.1; done
  mkdir -p "$WORK/www-$name/v1/policies"
  curl -sf "http://127.0.0.1:$daemon_port$PATH_UNDER_TEST" -o "$WORK/www-$name$PATH_UNDER_TEST"
  chmod -R a+rX "$WORK"
  cat >"$WORK/nginx-$name.conf" <<CONF
worker_processes $workers;
pid $WORK/nginx-$name.pid;
error_log $WORK/nginx-$name-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  default_type application/json;
  server { listen 127.0.0.1:$nginx_port; root $WORK/www-$name; }
}
CONF
  taskset -c "$cpus" nginx -c "$WORK/nginx-$name.conf"
  for _ in $(seq 50); do [ -f "$WORK/nginx-$name.pid" ] && curl -sf "http://127.0.0.1:$nginx_port$PATH_UNDER_TEST" >/dev/null && break; sleep 0.1; done
  PIDS+=("$(cat "$WORK/nginx-$name.pid")")
  cmp -s <(curl -s "http://127.0.0.1:$nginx_port$PATH_UNDER_TEST") <(curl -s "http://127.0.0.1:$daemon_port$PATH_UNDER_TEST") \
    || { echo "nginx and the daemon do not serve the same bytes" >&2; exit 1; }

  local wrk="taskset -c $wrk_cpus wrk -t$wrk_threads -c$CONNECTIONS -d${DURATION}s"
  echo "== $name: servers on CPU $cpus with $workers worker(s); $wrk"
  printf '%-6s %12s %12s %7s\n' round nginx stormguard ratio
  : >"$WORK/n"; : >"$WORK/s"
  for round in $(seq "$ROUNDS"); do
    local n s
    n=$($wrk "http://127.0.0.1:$nginx_port$PATH_UNDER_TEST" | awk '/Requests\/sec/ {print $2}')
    s=$($wrk "http://127.0.0.1:$daemon_port$PATH_UNDER_TEST" | awk '/Requests\/sec/ {print $2}')
    echo "$n" >>"$WORK/n"; echo "$s" >>"$WORK/s"
    printf '%-6s %12.0f %12.0f %7.3f\n' "$round" "$n" "$s" "$(echo "$s / $n" | bc -l)"
  done
  local mn ms
  mn=$(median <"$WORK/n"); ms=$(median <"$WORK/s")
  printf '%-6s %12.0f %12.0f %7.3f\n\n' median "$mn" "$ms" "$(echo "$ms / $mn" | bc -l)"
  kill "$(cat "$WORK/nginx-$name.pid")" "${PIDS[-2]}" 2>/dev/null || true
}

echo "$ROUNDS alternating rounds of ${DURATION}s each, same bytes from both servers"
run_layout pinned 1 1 0 1
run_layout shared 0,1 2 0,1 2
python3 bench/reload_latency.py --binary ./target/release/stormguard --swaps 100
