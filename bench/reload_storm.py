#!/usr/bin/env python3
"""Reload storm under load: wrk reads GET /v1/policies/payment-service while
the policy file is swapped the kubelet's way 100 times a second, and reader
threads check every body against its ETag (the first 16 bytes of the body's
SHA-256) and against the versions written. Prints requests/s, latency
percentiles, errors and torn reads (both must be 0).

Usage: bench/reload_storm.py [seconds=30] [swaps-per-second=100]
Needs wrk and a release build (cargo build --release).
"""
import hashlib
import http.client
import json
import re
import subprocess
import sys
import tempfile
import threading
import time

from harness import kubelet_layout, kubelet_swap, start_daemon

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 30
RATE = float(sys.argv[2]) if len(sys.argv) > 2 else 100


def version(n):
    return f"defaults:\n  maxRetries: {n % 100}\n  initialDelay: {100 + n % 7}ms\nservices:\n  payment-service: {{}}\n"


def main():
    root = tempfile.mkdtemp()
    policy = kubelet_layout(root, "retry-policy.yaml", version(0))
    daemon, port = start_daemon(policy, "--debounce", "5ms")
    try:
        written = {version(0)}
        lock = threading.Lock()
        stop = threading.Event()
        counts = {"checked": 0, "torn": 0, "examples": []}

        def swapper():
            generation = 0
            start = time.monotonic()
            while not stop.is_set():
                generation += 1
                text = version(generation)
                with lock:
                    written.add(json.dumps(generation % 100))
                kubelet_swap(root, "retry-policy.yaml", generation, text)
                time.sleep(max(0.0, start + generation / RATE - time.monotonic()))
            counts["swaps"] = generation

        def reader():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            while not stop.is_set():
                conn.request("GET", "/v1/policies/payment-service")
                response = conn.getresponse()
                body = response.read()
                etag = response.getheader("ETag", "").strip('"')
                ok = response.status == 200 and hashlib.sha256(body).hexdigest()[:32] == etag
                try:
                    n = json.loads(body)["policy"]["maxRetries"]
                    ok = ok and (n == 0 or json.dumps(n) in written)
                except (ValueError, KeyError):
                    ok = False
                with lock:
                    counts["checked"] += 1
                    if not ok:
                        counts["torn"] += 1
                        counts["examples"].append((response.status, etag, body[:120]))

        threads = [threading.Thread(target=swapper)] + [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        wrk = subprocess.run(["wrk", "-t1", "-c32", f"-d{int(SECONDS)}s", "--latency",
                              f"http://127.0.0.1:{port}/v1/policies/payment-service"],
                             capture_output=True, text=True)
        stop.set()
        for t in threads:
            t.join()
        metrics = http.client.HTTPConnection("127.0.0.1", port)
        metrics.request("GET", "/metrics")
        text = metrics.getresponse().read().decode()
        reloads = re.search(r'stormguard_policy_reloads_total\{result="success"\} (\d+)', text).group(1)
        failures = re.search(r'stormguard_policy_reloads_total\{result="failure"\} (\d+)', text).group(1)
        rps = re.search(r"Requests/sec:\s+([\d.]+)", wrk.stdout).group(1)
        latency = dict(re.findall(r"\s+(50|90|99)%\s+([\d.]+\w+)", wrk.stdout))
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", wrk.stdout)
        socket_errors = re.search(r"Socket errors: (.*)", wrk.stdout)
        print(f"{SECONDS:.0f} s, {counts['swaps']} kubelet swaps ({counts['swaps'] / SECONDS:.0f}/s), "
              f"{reloads} reloads applied, {failures} failed")
        print(f"wrk: {rps} requests/s, latency p50 {latency.get('50')} p90 {latency.get('90')} p99 {latency.get('99')}, "
              f"non-2xx {errors.group(1) if errors else 0}, socket errors {socket_errors.group(1) if socket_errors else 'none'}")
        print(f"readers: {counts['checked']} bodies checked against their ETag and the versions written, "
              f"{counts['torn']} torn or unknown")
        for example in counts["examples"][:3]:
            print("  e.g.", example)
        return 1 if counts["torn"] or errors or int(failures) else 0
    finally:
        daemon.kill()


if __name__ == "__main__":
    sys.exit(main())
