#!/usr/bin/env python3
"""Long-poll fan-out: N clients long-poll one service's policy; the policy
changes; how long until the last poller is woken, and what the daemon's
memory does with N pollers parked and after they hang up.

Usage: bench/fanout.py [pollers=10000]
Needs a release build (cargo build --release). Times are measured by an
asyncio client on the same machine, so they include its own scheduling.
"""
import asyncio
import http.client
import os
import resource
import statistics
import sys
import tempfile
import time

from harness import rss_mib, start_daemon

POLLERS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000


def policy(retries):
    return f"defaults:\n  maxRetries: 3\nservices:\n  payment-service:\n    maxRetries: {retries}\n"


async def poll(port, etag, woken, parked):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/policies/payment-service?wait=120s HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n".encode())
    await writer.drain()
    parked.append(1)
    status = await reader.readline()
    woken.append((time.monotonic(), status))
    writer.close()


async def hold(port, etag, writers):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /v1/policies/payment-service?wait=120s HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n".encode())
    await writer.drain()
    writers.append(writer)


async def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    directory = tempfile.mkdtemp()
    path = os.path.join(directory, "policy.yaml")
    with open(path, "w") as f:
        f.write(policy(1))
    daemon, port = start_daemon(path, "--max-long-polls", str(POLLERS * 2))
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/v1/policies/payment-service")
        response = conn.getresponse()
        etag = response.getheader("ETag")
        response.read()
        baseline = rss_mib(daemon.pid)

        woken, parked = [], []
        tasks = [asyncio.create_task(poll(port, etag, woken, parked)) for _ in range(POLLERS)]
        while len(parked) < POLLERS:
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        with_pollers = rss_mib(daemon.pid)
        staged = path + ".new"
        with open(staged, "w") as f:
            f.write(policy(2))
        changed = time.monotonic()
        os.rename(staged, path)
        await asyncio.gather(*tasks)
        delays = sorted((t - changed) * 1000 for t, _ in woken)
        ok = sum(1 for _, status in woken if b" 200 " in status)
        print(f"{POLLERS} pollers parked: daemon RSS {baseline:.1f} MiB -> {with_pollers:.1f} MiB "
              f"({(with_pollers - baseline) * 1024 / POLLERS:.1f} KiB per poller)")
        print(f"change -> woken (200 with the new policy: {ok}/{POLLERS}): "
              f"p50 {statistics.median(delays):.0f} ms, p99 {delays[int(0.99 * len(delays))]:.0f} ms, "
              f"last {delays[-1]:.0f} ms (debounce 50 ms included)")

        # Hang-ups: park and drop all pollers three times; memory held by
        # the allocator for reuse is fine, growth from cycle to cycle is a leak.
        for cycle in range(1, 4):
            writers = []
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.request("GET", "/v1/policies/payment-service")
            response = conn.getresponse()
            etag = response.getheader("ETag")
            response.read()
            await asyncio.gather(*[hold(port, etag, writers) for _ in range(POLLERS)])
            await asyncio.sleep(2)
            held = rss_mib(daemon.pid)
            for writer in writers:
                writer.close()
            await asyncio.sleep(3)
            print(f"cycle {cycle}: {POLLERS} pollers parked, RSS {held:.1f} MiB; all hung up, RSS {rss_mib(daemon.pid):.1f} MiB")
    finally:
        daemon.kill()


asyncio.run(main())
