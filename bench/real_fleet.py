#!/usr/bin/env python3
"""The real thing beside the model: a fleet of real processes returning to a
recovering dependency through stormguard-client, three ways, and the herd
simulator's figures for the same set-up.

It starts, on loopback, a dependency that answers 503 for 10 s and then
accepts 200 requests in each calendar second (503 beyond), the real daemon
serving bench/real-fleet.yaml, and 20 client processes with 50 callers each,
every caller wanting one call served from the same instant. Three runs:

- full jitter: the policy without a send gate;
- per-process gates: the gate on, each process pacing by what it learns alone;
- fleet: the gate on, every process asking the daemon for its share.

For each it prints wasted requests (those the dependency refused), p50 and
p99 time to success and the callers that gave up, and beside them the means
of `stormguard simulate` over seeds 1-5 with 20 processes and a 1 ms
latency, loopback's order: with no latency at all, the simulator answers the
first refusal before the other callers' first tries leave, so their gates
hold them back, which no real network allows. Target: the real fleet run
wastes at most 1.3x its simulation; exit 1 when it does not.

Usage: bench/real_fleet.py [--processes N] [--callers N] [--runs N] [--json FILE]
It builds what it runs first (release: the daemon and the client's examples).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

from harness import BINARY, ROOT, start_daemon

EXAMPLES = os.path.join(ROOT, "target", "release", "examples")
POLICY = os.path.join(ROOT, "bench", "real-fleet.yaml")
SEEDS = range(1, 6)
OUTAGE, CAPACITY, LATENCY = 10, 200, "1ms"
# (label, service in the policy file, callers' flags, simulate's flags)
WAYS = [
    ("full jitter", "herd-jittered", [], []),
    ("per-process gates", "herd-gated", ["--no-fleet-pacing"], []),
    ("fleet", "herd-gated", [], ["--fleet"]),
]


def percentile(values, q):
    """The q-quantile of values, nearest rank, as the simulator reports it."""
    ordered = sorted(values)
    return ordered[max(0, int(q * len(ordered) + 0.999999) - 1)] if ordered else float("nan")


def start_dependency(start_at_ms):
    dependency = subprocess.Popen(
        [os.path.join(EXAMPLES, "recovering_dependency"), "--listen", "127.0.0.1:0",
         "--start-at", str(start_at_ms), "--outage", str(OUTAGE), "--capacity", str(CAPACITY)],
        stdout=subprocess.PIPE, text=True)
    return dependency, dependency.stdout.readline().strip()


def real_run(service, flags, processes, callers):
    """One run of the real fleet: wasted, p50, p99, gave up, and the
    dependency's per-second counts."""
    daemon, port = start_daemon(POLICY)
    start_at = int(time.time() * 1000) + 3000
    dependency, address = start_dependency(start_at)
    herd = []
    try:
        herd += [
            subprocess.Popen(
                [os.path.join(EXAMPLES, "herd_callers"), "--daemon", f"http://127.0.0.1:{port}",
                 "--service", service, "--instance", f"pod-{i}", "--dependency", address,
                 "--callers", str(callers), "--start-at", str(start_at), *flags],
                stdout=subprocess.PIPE, text=True)
            for i in range(processes)
        ]
        results = []
        for process in herd:
            out, _ = process.communicate(timeout=600)
            if process.returncode != 0:
                raise RuntimeError(f"a client process failed ({process.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        with urllib.request.urlopen(f"{address}/stats", timeout=5) as response:
            stats = json.load(response)
    finally:
        for process in (*herd, dependency, daemon):
            process.kill()
            process.wait()
    seconds = [s for r in results for s in r["seconds"]]
    return {
        "wasted": stats["received"] - stats["accepted"],
        "p50_seconds": percentile(seconds, 0.50),
        "p99_seconds": percentile(seconds, 0.99),
        "gave_up": sum(r["gave_up"] for r in results),
        "attempts": sum(r["attempts"] for r in results),
        "requests_per_second": stats["requests_per_second"],
        "accepted_per_second": stats["accepted_per_second"],
    }


def simulated(service, flags, processes, callers):
    """Means over SEEDS of the simulator's run of the same set-up."""
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", service,
             "--clients", str(processes * callers), "--processes", str(processes),
             "--capacity", str(CAPACITY), "--outage", f"{OUTAGE}s", "--latency", LATENCY, *flags],
            check=True, capture_output=True, text=True).stdout
        run = json.loads(text)
        runs.append(run[-1] if isinstance(run, list) else run)
    return {key: statistics.mean(r[key] for r in runs) for key in ("wasted", "p50_seconds", "p99_seconds", "gave_up")}


def build():
    for what in (["--bin", "stormguard"], ["-p", "stormguard-client", "--examples"]):
        subprocess.run(["cargo", "build", "--release", "--quiet", *what], cwd=ROOT, check=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1, help="real runs per way; the table gives their mean")
    parser.add_argument("--json", help="write every run, real and simulated, to this file")
    opts = parser.parse_args()
    build()

    print(f"{opts.processes} processes x {opts.callers} callers; dependency down {OUTAGE} s, "
          f"then {CAPACITY} requests per calendar second; real: mean of {opts.runs} run(s), "
          f"simulated: mean of seeds {SEEDS.start}-{SEEDS.stop - 1}, latency {LATENCY}")
    print()
    print(f"{'':20} {'wasted':>15} {'p50 s':>13} {'p99 s':>13} {'gave up':>13}")
    print(f"{'':20} {'real':>7} {'sim':>7} {'real':>6} {'sim':>6} {'real':>6} {'sim':>6} {'real':>6} {'sim':>6}")
    report, failed = {}, False
    for label, service, flags, sim_flags in WAYS:
        reals = [real_run(service, flags, opts.processes, opts.callers) for _ in range(opts.runs)]
        real = {key: statistics.mean(r[key] for r in reals) for key in ("wasted", "p50_seconds", "p99_seconds", "gave_up")}
        sim = simulated(service, sim_flags, opts.processes, opts.callers)
        report[label] = {"real": reals, "simulated": sim}
        print(f"{label:20} {real['wasted']:7,.0f} {sim['wasted']:7,.0f} "
              f"{real['p50_seconds']:6.2f} {sim['p50_seconds']:6.2f} "
              f"{real['p99_seconds']:6.2f} {sim['p99_seconds']:6.2f} "
              f"{real['gave_up']:6.0f} {sim['gave_up']:6.1f}")
        if label == "fleet":
            ratio = real["wasted"] / max(sim["wasted"], 1)
            failed = ratio > 1.3
    print()
    print(f"fleet, real waste / simulated waste: {ratio:.2f} (target: at most 1.3): {'NOT MET' if failed else 'met'}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
