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
import socket
import subprocess
import sys
import tempfile
import threading
import time

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 600
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BINARY = os.path.join(ROOT, "target", "release", "stormguard")
REPORTS = r"""
local n = 0
request = function()
  n = n + 1
  local body = string.format('{"service":"payment-service","instance":"pod-%d","endpoints":[{"endpoint":"/e%d","requests":{"success":5,"error":1},"retries":{"1":1}}],"inFlight":1,"circuitState":"closed"}', n % 500, n % 40)
  return wrk.format("POST", "/v1/reports", {["Content-Type"] = "application/json"}, body)
end
"""


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def policy(n):
    return f"defaults:\n  maxRetries: {n % 5}\nservices:\n  payment-service:\n    maxRetries: {n % 3}\n"


def main():
    root = tempfile.mkdtemp()
    os.mkdir(os.path.join(root, "..gen_0"))
    with open(os.path.join(root, "..gen_0", "p.yaml"), "w") as f:
        f.write(policy(0))
    os.symlink("..gen_0", os.path.join(root, "..data"))
    os.symlink("..data/p.yaml", os.path.join(root, "p.yaml"))
    script = os.path.join(root, "reports.lua")
    with open(script, "w") as f:
        f.write(REPORTS)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    daemon = subprocess.Popen([BINARY, "serve", "--listen", f"127.0.0.1:{port}", "--policy", os.path.join(root, "p.yaml")],
                              stderr=subprocess.DEVNULL)
    stop = threading.Event()
    try:
        time.sleep(0.5)

        def reloader():
            n = 0
            while not stop.wait(2):
                n += 1
                os.mkdir(os.path.join(root, f"..gen_{n}"))
                with open(os.path.join(root, f"..gen_{n}", "p.yaml"), "w") as f:
                    f.write(policy(n))
                os.symlink(f"..gen_{n}", os.path.join(root, "..data_tmp"))
                os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
                os.unlink(os.path.join(root, f"..gen_{n - 1}", "p.yaml"))
                os.rmdir(os.path.join(root, f"..gen_{n - 1}"))

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
            low, high = min(settled), max(settled)
            print(f"after warm-up: RSS {low:.1f} to {high:.1f} MiB ({(high - low) / low * 100:.1f} % spread)")
        for name, out in zip(["policy reads", "reports"], outputs):
            rate = [line for line in out.splitlines() if "Requests/sec" in line or "Non-2xx" in line]
            print(f"{name}: " + "; ".join(line.strip() for line in rate))
    finally:
        stop.set()
        daemon.kill()


if __name__ == "__main__":
    main()
