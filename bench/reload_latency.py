#!/usr/bin/env python3
"""Reload latency: from a kubelet-style ConfigMap swap to the new ETag served.

For each swap a long-poll (If-None-Match + ?wait) is parked on the daemon
first; the latency is the time from the `..data` rename to the long-poll's
answer carrying the new ETag. That includes the debounce, reading, parsing,
validating, swapping and the HTTP answer. Prints p50/p99/max over N swaps.
"""
import argparse
import http.client
import os
import re
import subprocess
import tempfile
import threading
import time

KEY = "retry-policy.yaml"


def kubelet_swap(root, generation, text):
    new = f"..2026_11_22_05_00_00.{generation:04}"
    os.mkdir(os.path.join(root, new))
    with open(os.path.join(root, new, KEY), "w") as f:
        f.write(text)
    old = os.readlink(os.path.join(root, "..data")) if os.path.islink(os.path.join(root, "..data")) else None
    os.symlink(new, os.path.join(root, "..data_tmp"))
    os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
    if old:
        for name in os.listdir(os.path.join(root, old)):
            os.unlink(os.path.join(root, old, name))
        os.rmdir(os.path.join(root, old))


def get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status, response.getheader("ETag")


def percentile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="./target/release/stormguard")
    parser.add_argument("--policy", default="policies/retry-policy.yaml")
    parser.add_argument("--swaps", type=int, default=100)
    args = parser.parse_args()
    seed = open(args.policy).read()
    root = tempfile.mkdtemp()
    kubelet_swap(root, 0, seed)
    os.symlink(os.path.join("..data", KEY), os.path.join(root, KEY))
    daemon = subprocess.Popen(
        [args.binary, "serve", "--listen", "127.0.0.1:0", "--policy", os.path.join(root, KEY),
         "--recheck-interval", "1h"],
        stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in daemon.stderr:
            match = re.search(r"serving on http://127\.0\.0\.1:(\d+)", line)
            if match:
                port = int(match.group(1))
                break
        threading.Thread(target=lambda: [None for _ in daemon.stderr], daemon=True).start()
        path = "/v1/policies/payment-service"
        latencies = []
        for i in range(1, args.swaps + 1):
            _, etag = get(port, path)
            result = {}

            def poll():
                result["status"], result["etag"] = get(port, path + "?wait=30s", {"If-None-Match": etag})
                result["at"] = time.perf_counter()

            waiter = threading.Thread(target=poll)
            waiter.start()
            time.sleep(0.05)  # let the long-poll park
            text = seed.replace("maxRetries: 2", f"maxRetries: {2 + i % 2 * 2}\n    # swap {i}", 1)
            swapped = time.perf_counter()
            kubelet_swap(root, i, text)
            waiter.join()
            assert result["status"] == 200 and result["etag"] != etag, result
            latencies.append((result["at"] - swapped) * 1000)
        latencies.sort()
        print(f"reload latency over {len(latencies)} kubelet swaps (debounce included): "
              f"p50 {percentile(latencies, 0.50):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms, "
              f"max {latencies[-1]:.1f} ms")
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
