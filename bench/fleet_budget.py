#!/usr/bin/env python3
"""A retry budget for the whole fleet, for real, beside the simulator.

It starts, on loopback, a dependency that fails half the calls it receives
at random and never runs out of capacity, the real daemon serving
bench/real-fleet.yaml, and 20 Rust client processes (the client library's
herd example) whose first tries arrive at random, 50 a second each (1,000 in
all), for 60 s; each call tries four times under the default retry budget:

- per-process budget: each process's floor of 10 retries a second;
- fleet budget: the floor is the fleet's (`budget.scope: fleet`), which the
  daemon divides among the processes from their reports (every 10 s, the
  first a second after a process starts).

For each it prints the amplification measured at the dependency (requests
it received ÷ first tries) and beside it the mean of `stormguard simulate
--scenario errors` over seeds 2001-2020 for the same set-up. Target: the real
fleet budget's amplification within 10 % of its simulation; exit 1 when it
is not.

With `--replicas N [--pace-store]` the processes reach N real daemons behind
a loopback proxy that deals connections as a Kubernetes Service does,
sharing a real Redis with `--pace-store`.

Usage: bench/fleet_budget.py [--processes N] [--rate R] [--seconds S] [--runs N]
       [--replicas N [--pace-store]] [--json FILE]
It builds what it runs first (release: the daemon and the Rust client's examples).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

from harness import BINARY
from real_fleet import EXAMPLES, HERDS, POLICY, Fleet, build

ERROR_RATE = 0.5
SEEDS = range(2001, 2021)
WAYS = [("per-process budget", "errors-budgeted"), ("fleet budget", "errors-fleet-budget")]


def start_dependency(start_at_ms):
    """The failing dependency: no outage, a capacity it never reaches."""
    dependency = subprocess.Popen(
        [os.path.join(EXAMPLES, "recovering_dependency"), "--listen", "127.0.0.1:0",
         "--start-at", str(start_at_ms), "--outage", "0", "--capacity", "1000000000",
         "--error-rate", str(ERROR_RATE)],
        stdout=subprocess.PIPE, text=True)
    return dependency, dependency.stdout.readline().strip()


def real_run(service, opts):
    """One run: first tries, requests the dependency received, amplification."""
    fleet = Fleet(opts.replicas, opts.pace_store)
    start_at = int(time.time() * 1000) + 3000
    daemon_url = fleet.start(start_at)
    dependency, address = start_dependency(start_at)
    herd = []
    try:
        rate = opts.rate / opts.processes
        herd = [
            subprocess.Popen(
                [*HERDS["rust"], "--daemon", daemon_url, "--service", service, "--instance", f"pod-{i}",
                 "--dependency", address, "--rate", str(rate), "--seconds", str(opts.seconds),
                 "--seed", str(i + 1), "--report-every", "10", "--start-at", str(start_at)],
                stdout=subprocess.PIPE, text=True)
            for i in range(opts.processes)
        ]
        results = []
        for process in herd:
            out, _ = process.communicate(timeout=opts.seconds + 600)
            if process.returncode != 0:
                raise RuntimeError(f"a client process failed ({process.returncode})")
            results.append(json.loads(out.strip().splitlines()[-1]))
        with urllib.request.urlopen(f"{address}/stats", timeout=5) as response:
            stats = json.load(response)
    finally:
        for process in (*herd, dependency):
            process.kill()
            process.wait()
        fleet.stop()
    first_tries = sum(r["succeeded"] + r["gave_up"] for r in results)
    return {
        "first_tries": first_tries,
        "received": stats["received"],
        "amplification": stats["received"] / first_tries,
        "requests_per_second": stats["requests_per_second"],
    }


def simulated(service, opts):
    """The mean amplification over SEEDS of the simulator's run of the same set-up."""
    flags = ["--replicas", str(opts.replicas)] + (["--pace-store"] if opts.pace_store else [])
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--scenario", "errors",
             "--rate", str(opts.rate), "--error-rate", str(ERROR_RATE), "--processes", str(opts.processes),
             "--policy", POLICY, "--service", service, *flags],
            check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(text)["amplification"])
    return statistics.mean(runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000, help="first tries a second, in all")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--pace-store", action="store_true")
    parser.add_argument("--json", help="write the figures here too")
    opts = parser.parse_args()
    build(("rust",))
    print(f"{opts.processes} processes, {opts.rate:,.0f} first tries a second in all for {opts.seconds:.0f} s, "
          f"{ERROR_RATE:.0%} errors, {opts.replicas} daemon(s){' sharing Redis' if opts.pace_store else ''}; "
          f"real: mean of {opts.runs} run(s), simulated: mean of seeds {SEEDS.start}-{SEEDS.stop - 1}")
    print()
    print(f"{'amplification':24} {'real':>8} {'sim':>8} {'real/sim':>9}")
    figures, met = {}, True
    for label, service in WAYS:
        runs = [real_run(service, opts) for _ in range(opts.runs)]
        real = statistics.mean(r["amplification"] for r in runs)
        sim = simulated(service, opts)
        figures[label] = {"real": real, "simulated": sim, "runs": runs}
        print(f"{label:24} {real:8.3f} {sim:8.3f} {real / sim:9.3f}")
        if service == "errors-fleet-budget":
            met = abs(real / sim - 1) <= 0.10
    print()
    print(f"fleet budget within 10 % of its simulation: {'met' if met else 'NOT MET'}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(figures, f, indent=2)
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
