#!/usr/bin/env python3
"""Report flood: wrk posts reports as fast as the machine allows for SECONDS,
spread over 10^5 distinct endpoint names, 10^4 instances and 300 services
(most not in the policy file). Prints the daemon's RSS every 5 s, the series
count at the end, and what the cardinality guard folded.

Usage: bench/report_flood.py [seconds=60]
Needs wrk and a release build (cargo build --release).
"""
import http.client
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from harness import ROOT, rss_mib, start_daemon

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 60

LUA = r"""
local n = 0
request = function()
  n = n + 1
  local body = string.format(
    '{"service":"svc-%d","instance":"pod-%d","endpoints":[{"endpoint":"/e%d","requests":{"success":3,"error":1,"server_error":1},"retries":{"1":2,"%d":1}}],"inFlight":2,"circuitState":"closed","budget":{"retriesDenied":1,"remainingRatio":0.5}}',
    n % 300, (n * 7 + wrk.thread_id) % 10000, (n * 13) % 100000, n % 20 + 1)
  return wrk.format("POST", "/v1/reports", {["Content-Type"] = "application/json"}, body)
end
setup = function(thread) thread:set("id", 0) end
"""


def main():
    work = tempfile.mkdtemp()
    script = os.path.join(work, "flood.lua")
    with open(script, "w") as f:
        f.write(LUA.replace("wrk.thread_id", "0"))
    daemon, port = start_daemon(os.path.join(ROOT, "policies", "retry-policy.yaml"))
    try:
        curve = [(0, rss_mib(daemon.pid))]
        stop = threading.Event()

        def sample():
            start = time.monotonic()
            while not stop.wait(5):
                curve.append((round(time.monotonic() - start), rss_mib(daemon.pid)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        wrk = subprocess.run(["wrk", "-t2", "-c64", f"-d{SECONDS}s", "-s", script, f"http://127.0.0.1:{port}"],
                             capture_output=True, text=True)
        stop.set()
        sampler.join()
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        series = sum(1 for line in text.splitlines() if line.startswith(("http_client_", "http_server_", "circuit_breaker", "stormguard_budget")))
        accepted = re.search(r'stormguard_reports_total\{result="accepted"\} (\d+)', text).group(1)
        folded = dict(re.findall(r'stormguard_report_labels_folded_total\{label="(\w+)"\} (\d+)', text))
        instances = re.search(r"stormguard_report_instances (\d+)", text).group(1)
        rate = re.search(r"Requests/sec:\s+([\d.]+)", wrk.stdout).group(1)
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", wrk.stdout)
        print(f"{SECONDS} s flood: {accepted} reports accepted ({rate}/s), non-2xx: {errors.group(1) if errors else 0}")
        print(f"client series at the end: {series}; instances kept: {instances}; folded: {folded}")
        print("RSS (s, MiB): " + ", ".join(f"{t}: {m:.1f}" for t, m in curve))
    finally:
        daemon.kill()


if __name__ == "__main__":
    main()
