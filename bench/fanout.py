#!/usr/bin/env python3
"""Long-poll fan-out: N watchers park a long-poll on one service's policy;
the daemon's memory with them parked; then the policy changes, and how long
until the last one is woken.

Three kinds of watcher side by side, in the same run:
- lean: connections that carry GETs and Content-Length bodies, as every
  common HTTP client's do;
- general: connections that first sent a chunked report, which moves them
  to the general HTTP stack (the reference: every connection cost this
  before the front existed);
- tls: HTTPS connections (the daemon with --tls-cert and --tls-key, the
  test certificate of clients/credentials), served by the same lean front
  once rustls has done the handshake (target: at most 16 KiB each).

Usage: bench/fanout.py [N ...]   (default: 10000 50000)
Needs a release build (cargo build --release). Each N needs N open files in
the daemon and spreads the watchers over client processes and loopback
source addresses; an N past this machine's open-file limit is reported as
not run, with the limit. Times are measured by asyncio clients on the same
machine, so they include their own scheduling.
"""
import asyncio
import http.client
import multiprocessing
import os
import resource
import ssl
import statistics
import sys
import tempfile
import time

from harness import ROOT, connection, rss_mib, start_daemon

PER_PROCESS = 5_000
SERVICE = "payment-service"
CREDENTIALS = os.path.join(ROOT, "clients", "credentials")
TLS_FLAGS = ("--tls-cert", os.path.join(CREDENTIALS, "daemon.crt"),
             "--tls-key", os.path.join(CREDENTIALS, "daemon.key"))


def trusting():
    """An SSL context that trusts the test CA, for the tls kind."""
    return ssl.create_default_context(cafile=os.path.join(CREDENTIALS, "ca.crt"))


def policy(retries):
    return f"defaults:\n  maxRetries: 3\nservices:\n  {SERVICE}:\n    maxRetries: {retries}\n"


def chunked_report():
    """The same empty batch from every watcher: the daemon keeps one instance, not one per watcher."""
    body = '{"instance":"bench","sequence":1,"reports":[]}'
    return (f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n{body}\r\n0\r\n\r\n").encode()


async def read_answer(reader):
    """One answer's status line; its head and body are consumed."""
    status = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def watcher(port, source, etag, kind, parked, woken, connecting):
    try:
        async with connecting:
            tls = {"ssl": trusting(), "server_hostname": "localhost"} if kind == "tls" else {}
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0), **tls)
            if kind == "general":
                writer.write(chunked_report())
                await writer.drain()
                await read_answer(reader)
            writer.write(f"GET /v1/policies/{SERVICE}?wait=300s HTTP/1.1\r\nHost: x\r\n"
                         f"If-None-Match: {etag}\r\n\r\n".encode())
            await writer.drain()
    except OSError as error:
        parked.put(1)
        woken.append((time.monotonic(), f"not parked: {error}".encode()))
        return
    parked.put(1)
    try:
        status = await read_answer(reader)
    except (OSError, asyncio.IncompleteReadError) as error:
        status = f"lost: {error}".encode()
    woken.append((time.monotonic(), status))
    writer.close()


def client_process(port, source, etag, kind, count, parked, results):
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)

    async def run():
        woken = []
        # Connect a few hundred at a time: the listen backlog is finite.
        connecting = asyncio.Semaphore(200)
        await asyncio.gather(*[watcher(port, source, etag, kind, parked, woken, connecting) for _ in range(count)])
        results.put(woken)

    asyncio.run(run())


def etag_of(port, tls):
    conn = connection(port, tls)
    conn.request("GET", f"/v1/policies/{SERVICE}")
    response = conn.getresponse()
    response.read()
    return response.getheader("ETag")


def measure(watchers, kind):
    directory = tempfile.mkdtemp()
    path = os.path.join(directory, "policy.yaml")
    with open(path, "w") as f:
        f.write(policy(1))
    tls = trusting() if kind == "tls" else None
    flags = ("--max-long-polls", str(watchers + 1000), *(TLS_FLAGS if tls else ()))
    daemon, port = start_daemon(path, *flags, tls=tls)
    try:
        etag = etag_of(port, tls)
        time.sleep(0.5)
        baseline = rss_mib(daemon.pid)
        parked, results = multiprocessing.Queue(), multiprocessing.Queue()
        processes = []
        for k, first in enumerate(range(0, watchers, PER_PROCESS)):
            count = min(PER_PROCESS, watchers - first)
            args = (port, f"127.0.0.{k + 2}", etag, kind, count, parked, results)
            processes.append(multiprocessing.Process(target=client_process, args=args))
            processes[-1].start()
        for _ in range(watchers):
            parked.get(timeout=120)
        time.sleep(3)
        held = rss_mib(daemon.pid)
        staged = path + ".new"
        with open(staged, "w") as f:
            f.write(policy(2))
        changed = time.monotonic()
        os.rename(staged, path)
        woken = [w for _ in processes for w in results.get(timeout=120)]
        for process in processes:
            process.join()
        delays = sorted((t - changed) * 1000 for t, _ in woken)
        fresh = sum(1 for _, status in woken if b" 200 " in status)
        for _, status in woken:
            if b" 200 " not in status:
                print(f"  a watcher was not woken with the new policy: {status.decode(errors='replace').strip()}")
                break
        return {
            "baseline": baseline, "held": held,
            "per_watcher_kib": (held - baseline) * 1024 / watchers,
            "fresh": fresh, "p50": statistics.median(delays),
            "p99": delays[int(0.99 * (len(delays) - 1))], "last": delays[-1],
        }
    finally:
        daemon.kill()


def main():
    sizes = [int(n) for n in sys.argv[1:]] or [10_000, 50_000]
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    print(f"{'watchers':>9} {'connections':<8} {'RSS before':>10} {'parked':>9} {'per watcher':>12} "
          f"{'woken 200':>9} {'wake p50':>9} {'p99':>8} {'last':>8}")
    for watchers in sizes:
        if watchers + 100 > limit:
            print(f"{watchers:>9} not run: the daemon needs {watchers + 100} open files; this machine's hard limit is {limit}")
            continue
        lean, general, tls = (measure(watchers, kind) for kind in ("lean", "general", "tls"))
        for kind, r in (("lean", lean), ("general", general), ("tls", tls)):
            print(f"{watchers:>9} {kind:<8} {r['baseline']:>8.1f} MiB {r['held']:>5.1f} MiB {r['per_watcher_kib']:>8.1f} KiB "
                  f"{r['fresh']:>9} {r['p50']:>6.0f} ms {r['p99']:>5.0f} ms {r['last']:>5.0f} ms")
        print(f"{watchers:>9} ratio    lean / general memory per watcher: "
              f"{lean['per_watcher_kib'] / general['per_watcher_kib']:.2f}; tls / general: "
              f"{tls['per_watcher_kib'] / general['per_watcher_kib']:.2f}")


if __name__ == "__main__":
    main()
