#!/usr/bin/env python3
"""Soak: SECONDS of mixed load on one daemon (policy reads with wrk, reports
with wrk, 50 long-pollers, a kubelet-style reload every 2 s), printing the
daemon's RSS every 10 s. After a minute's warm-up, RSS should stay flat
within 10 %.

Usage: bench/soak.py [seconds=600]
Needs wrk and a release build (cargo build --release).
"""
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time

from harness import kubelet_layout, kubelet_swap, rss_mib, start_daemon

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
REPORTS = r"""
local n = 0
request = function()
  n = n + 1
  local body = string.format('{"service":"payment-service","instance":"pod-%d","endpoints":[{"endpoint":"/e%d","requests":{"success":5,"error":1},"retries":{"1":1}}],"inFlight":1,"circuitState":"closed"}', n % 500, n % 40)
  return wrk.format("POST", "/v1/reports", {["Content-Type"] = "application/json"}, body)
end
"""


def policy(n):
    return f"defaults:\n  maxRetries: {n % 5}\nservices:\n  payment-service:\n    maxRetries: {n % 3}\n"


def main():
    root = tempfile.mkdtemp()
    policy_path = kubelet_layout(root, "p.yaml", policy(0))
    script = os.path.join(root, "reports.lua")
    with open(script, "w") as f:
        f.write(REPORTS)
    daemon, port = start_daemon(policy_path)
    stop = threading.Event()
    try:
        def reloader():
            n = 0
            while not stop.wait(2):
                n += 1
                kubelet_swap(root, "p.yaml", n, policy(n))

        def poller():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            etag = None
            while not stop.is_set():
                headers = {"If-None-Match": etag} if etag else {}
                conn.request("GET", "/v1/policies/payment-service?wait=5s" if etag else "/v1/policies/payment-service", headers=headers)
                response = conn.getresponse()
                response.read()
                etag = response.getheader("ETag") or etag

        threads = [threading.Thread(target=reloader)] + [threading.Thread(target=poller) for _ in range(50)]
        for t in threads:
            t.start()
        loads = [
            subprocess.Popen(["wrk", "-t1", "-c8", f"-d{SECONDS}s", f"http://127.0.0.1:{port}/v1/policies/payment-service"],
                             stdout=subprocess.PIPE, text=True),
            subprocess.Popen(["wrk", "-t1", "-c8", f"-d{SECONDS}s", "-s", script, f"http://127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, text=True),
        ]
        curve = []
        start = time.monotonic()
        while time.monotonic() - start < SECONDS:
            time.sleep(10)
            curve.append((round(time.monotonic() - start), rss_mib(daemon.pid)))
            print(f"{curve[-1][0]:>4} s  RSS {curve[-1][1]:.1f} MiB", flush=True)
        outputs = [load.communicate()[0] for load in loads]
        stop.set()
        for t in threads:
            t.join()
        settled = [m for t, m in curve if t >= 60]
        if settled:
            median = sorted(settled)[len(settled) // 2]
            worst = max(abs(m - median) for m in settled) / median * 100
            half = len(settled) // 2
            first, second = sum(settled[:half]) / max(half, 1), sum(settled[half:]) / max(len(settled) - half, 1)
            print(f"after warm-up: RSS {min(settled):.1f} to {max(settled):.1f} MiB, within ±{worst:.1f} % of its "
                  f"median {median:.1f} MiB; mean {first:.1f} MiB in the first half, {second:.1f} MiB in the second")
        for name, out in zip(["policy reads", "reports"], outputs):
            rate = [line for line in out.splitlines() if "Requests/sec" in line or "Non-2xx" in line]
            print(f"{name}: " + "; ".join(line.strip() for line in rate))
    finally:
        stop.set()
        daemon.kill()


if __name__ == "__main__":
    main()
