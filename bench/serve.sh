#!/usr/bin/env bash
# Side-by-side benchmark, in one run on one machine.
#
#  1. wrk against GET /v1/policies/payment-service on the daemon, on nginx
#     serving the very same JSON bytes as a static file, and on a bare axum
#     server (bench/bare-axum: axum's defaults, one thread) answering with
#     those bytes; with BASELINE=path/to/another/stormguard, that binary too
#     (an older build, say; its answer may differ a little). Same wrk threads, connections and duration, in
#     alternating rounds; the median requests/s of each and its ratio to the
#     daemon's. Two layouts:
#       pinned: each server on CPU 1 with one worker, wrk on CPU 0 (low noise)
#       shared: each server with two workers, wrk beside it on both CPUs
#     (bare axum has one thread in both: it is the reference for one worker.)
#  2. reload latency over kubelet-style ConfigMap swaps (bench/reload_latency.py).
#
# Needs wrk, nginx, python3, bc and taskset (apt-get install -y wrk nginx-light bc).
# Usage: [BASELINE=...] bench/serve.sh [seconds-per-round] [connections] [rounds] [layouts]
#   layouts: "pinned shared" (default), or one of them
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CONNECTIONS=${2:-64}
ROUNDS=${3:-5}
LAYOUTS=${4:-pinned shared}
for tool in wrk nginx python3 taskset bc; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y wrk nginx-light python3 util-linux bc" >&2; exit 1; }
done

cargo build --release --quiet -p stormguard -p bare-axum
WORK=$(mktemp -d)
chmod 755 "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
wait_for() { for _ in $(seq 100); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "$1 never answered" >&2; exit 1; }
PATH_UNDER_TEST=/v1/policies/payment-service

# start_daemon BINARY CPUS WORKERS: adds its port to PORTS.
start_daemon() {
  local port
  port=$(free_port)
  taskset -c "$2" "$1" serve --workers "$3" --policy policies/retry-policy.yaml \
    --listen "127.0.0.1:$port" >/dev/null 2>>"$WORK/daemons.log" &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$port/readyz"
  PORTS+=("$port")
}

# run_layout NAME CPUS WORKERS WRK_CPUS WRK_THREADS
run_layout() {
  local name=$1 cpus=$2 workers=$3 wrk_cpus=$4 wrk_threads=$5
  local names=(stormguard nginx bare-axum)
  PORTS=()
  start_daemon ./target/release/stormguard "$cpus" "$workers"
  local body="$WORK/www-$name$PATH_UNDER_TEST"
  mkdir -p "$(dirname "$body")"
  curl -sf "http://127.0.0.1:${PORTS[0]}$PATH_UNDER_TEST" -o "$body"
  chmod -R a+rX "$WORK"

  local nginx_port
  nginx_port=$(free_port)
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
  wait_for "http://127.0.0.1:$nginx_port$PATH_UNDER_TEST"
  PIDS+=("$(cat "$WORK/nginx-$name.pid")")
  PORTS+=("$nginx_port")

  local axum_port
  axum_port=$(free_port)
  taskset -c "$cpus" ./target/release/bare-axum "127.0.0.1:$axum_port" "$body" >/dev/null &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$axum_port$PATH_UNDER_TEST"
  PORTS+=("$axum_port")

  if [ -n "${BASELINE:-}" ]; then
    names+=(baseline)
    start_daemon "$BASELINE" "$cpus" "$workers"
  fi
  local ports=("${PORTS[@]}")
  for i in 1 2; do
    cmp -s "$body" <(curl -s "http://127.0.0.1:${ports[$i]}$PATH_UNDER_TEST") \
      || { echo "${names[$i]} does not serve the same bytes" >&2; exit 1; }
  done
  if [ -n "${BASELINE:-}" ]; then
    echo "baseline answers $(curl -s "http://127.0.0.1:${ports[3]}$PATH_UNDER_TEST" | wc -c) bytes, the others $(wc -c <"$body")"
  fi

  local wrk="taskset -c $wrk_cpus wrk -t$wrk_threads -c$CONNECTIONS -d${DURATION}s"
  echo "== $name: servers on CPU $cpus with $workers worker(s); $wrk"
  printf '%-6s' round; printf ' %12s' "${names[@]}"; echo
  for i in "${!ports[@]}"; do : >"$WORK/rps-$i"; done
  for round in $(seq "$ROUNDS"); do
    printf '%-6s' "$round"
    for i in "${!ports[@]}"; do
      local rps
      rps=$($wrk "http://127.0.0.1:${ports[$i]}$PATH_UNDER_TEST" | awk '/Requests\/sec/ {print $2}')
      echo "$rps" >>"$WORK/rps-$i"
      printf ' %12.0f' "$rps"
    done
    echo
  done
  local medians=()
  for i in "${!ports[@]}"; do medians+=("$(median <"$WORK/rps-$i")"); done
  printf '%-6s' median; printf ' %12.0f' "${medians[@]}"; echo
  printf '%-6s' ratio
  for i in "${!ports[@]}"; do printf ' %12.3f' "$(echo "${medians[0]} / ${medians[$i]}" | bc -l)"; done
  echo "   (stormguard / each, of the medians)"
  # Rounds run one server after another and the machine drifts between
  # them: the median of each round's own ratio cancels most of the drift.
  printf '%-6s' paired
  for i in "${!ports[@]}"; do
    paste "$WORK/rps-0" "$WORK/rps-$i" | awk '{print $1 / $2}' | median | xargs printf ' %12.3f'
  done
  echo "   (stormguard / each, median of the rounds' ratios)"
  echo
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  PIDS=()
}

echo "$ROUNDS alternating rounds of ${DURATION}s each, same bytes from every server"
for layout in $LAYOUTS; do
  case $layout in
    pinned) run_layout pinned 1 1 0 1 ;;
    shared) run_layout shared 0,1 2 0,1 2 ;;
    *) echo "unknown layout $layout (pinned, shared)" >&2; exit 2 ;;
  esac
done
python3 bench/reload_latency.py --binary ./target/release/stormguard --swaps 100
