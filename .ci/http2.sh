#!/usr/bin/env bash
# HTTP/2 checked by nghttp2's own tools (Debian's nghttp2-client) against
# the real daemon, plain (prior knowledge) and over TLS (ALPN h2):
#  - h2load drives many streams over a few connections, and HTTP/1.1 too:
#    every request must succeed with 2xx;
#  - nghttp checks single exchanges frame by frame: a GET, a conditional
#    GET, a report POSTed over HTTP/2, a 404, and a long-poll woken by an
#    edit of the policy file.
# Usage: .ci/http2.sh path/to/stormguard
set -euo pipefail
cd "$(dirname "$0")/.."
BINARY=${1:?usage: .ci/http2.sh path/to/stormguard}
for tool in h2load nghttp curl python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nghttp2-client curl" >&2; exit 1; }
done
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL: $*" >&2; exit 1; }

cp policies/retry-policy.yaml "$WORK/policy.yaml"
PLAIN=$(free_port); SECURE=$(free_port)
"$BINARY" serve --policy "$WORK/policy.yaml" --listen "127.0.0.1:$PLAIN" 2>"$WORK/plain.log" &
PIDS+=($!)
"$BINARY" serve --policy "$WORK/policy.yaml" --listen "127.0.0.1:$SECURE" \
  --tls-cert clients/credentials/daemon.crt --tls-key clients/credentials/daemon.key 2>"$WORK/secure.log" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PLAIN/readyz" >/dev/null && break; sleep 0.1; done
for _ in $(seq 100); do curl -sfk "https://127.0.0.1:$SECURE/readyz" >/dev/null && break; sleep 0.1; done
POLICY=/v1/policies/payment-service

# h2load RUN-NAME ARGS...: every request must be answered 2xx.
h2load_all_succeed() {
  local name=$1; shift
  local out="$WORK/h2load-$name.txt"
  h2load "$@" >"$out" 2>&1 || { cat "$out"; fail "h2load $name exited non-zero"; }
  local total succeeded ok
  total=$(awk '/^requests:/ {print $2}' "$out")
  succeeded=$(awk '/^requests:/ {for (i=1;i<=NF;i++) if ($(i+1) ~ /^succeeded/) print $i}' "$out")
  ok=$(awk '/^status codes:/ {print $3}' "$out")
  [ "$total" -gt 0 ] && [ "$succeeded" = "$total" ] && [ "$ok" = "$total" ] \
    || { cat "$out"; fail "h2load $name: $succeeded of $total succeeded, $ok answered 2xx"; }
  echo "h2load $name: $total of $total answered 2xx ($(awk '/^finished in/ {print $3, $4, $5}' "$out" | tr -d ,))"
}
h2load_all_succeed h2c -n 20000 -c 10 -m 20 "http://127.0.0.1:$PLAIN$POLICY"
h2load_all_succeed h2-over-tls -n 20000 -c 10 -m 20 "https://127.0.0.1:$SECURE$POLICY"
grep -q "Application protocol: h2" "$WORK/h2load-h2-over-tls.txt" || fail "TLS did not negotiate h2"
h2load_all_succeed http1.1 --h1 -n 20000 -c 10 "http://127.0.0.1:$PLAIN$POLICY"
h2load_all_succeed http1.1-over-tls --h1 -n 5000 -c 10 "https://127.0.0.1:$SECURE$POLICY"

# nghttp NAME EXPECTED-STATUS ARGS...: one exchange, frames shown; the status it ends with.
nghttp_status() {
  local name=$1 expected=$2; shift 2
  local out="$WORK/nghttp-$name.txt"
  nghttp -nv "$@" >"$out" 2>&1 || { cat "$out"; fail "nghttp $name exited non-zero"; }
  grep -q "recv (stream_id=.*) :status: $expected" "$out" || { cat "$out"; fail "nghttp $name: no :status $expected"; }
  grep -q "recv GOAWAY" "$out" && grep "recv GOAWAY" "$out" | grep -vq "error_code=NO_ERROR" \
    && { cat "$out"; fail "nghttp $name: GOAWAY with an error"; }
  echo "nghttp $name: $expected"
}
for base in "http://127.0.0.1:$PLAIN" "https://127.0.0.1:$SECURE"; do
  nghttp_status "get-${base%%:*}" 200 "$base$POLICY"
  etag=$(grep -i "recv (stream_id=.*) etag:" "$WORK/nghttp-get-${base%%:*}.txt" | head -1 | sed 's/.*etag: //I')
  [ -n "$etag" ] || fail "no ETag over HTTP/2"
  nghttp_status "conditional-${base%%:*}" 304 -H "if-none-match: $etag" "$base$POLICY"
  echo '{"instance":"http2-check","sequence":1,"reports":[]}' >"$WORK/report.json"
  nghttp_status "report-${base%%:*}" 202 -H "content-type: application/json" -d "$WORK/report.json" "$base/v1/reports"
  nghttp_status "missing-${base%%:*}" 404 "$base/nowhere"
done

# A long-poll over HTTP/2 wakes when the policy changes.
etag=$(grep -i "recv (stream_id=.*) etag:" "$WORK/nghttp-get-http.txt" | head -1 | sed 's/.*etag: //I')
nghttp -nv -H "if-none-match: $etag" "http://127.0.0.1:$PLAIN$POLICY?wait=30s" >"$WORK/nghttp-long-poll.txt" 2>&1 &
POLL=$!
sleep 1
sed 's/maxRetries: 2/maxRetries: 4/' "$WORK/policy.yaml" >"$WORK/policy.new" && mv "$WORK/policy.new" "$WORK/policy.yaml"
started=$(date +%s)
wait "$POLL" || { cat "$WORK/nghttp-long-poll.txt"; fail "the HTTP/2 long-poll failed"; }
grep -q ":status: 200" "$WORK/nghttp-long-poll.txt" || { cat "$WORK/nghttp-long-poll.txt"; fail "the HTTP/2 long-poll was not woken with the new policy"; }
[ $(( $(date +%s) - started )) -lt 10 ] || fail "the HTTP/2 long-poll woke late"
echo "nghttp long-poll: woken by the edit"

for port in "http://127.0.0.1:$PLAIN" ; do curl -sf "$port/healthz" >/dev/null || fail "the daemon stopped answering"; done
curl -sfk "https://127.0.0.1:$SECURE/healthz" >/dev/null || fail "the TLS daemon stopped answering"
echo "HTTP/2: h2load and nghttp found nothing wrong"
