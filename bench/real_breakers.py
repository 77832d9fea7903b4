#!/usr/bin/env python3
"""Fleet half-open against a real dependency that is not this project's code:
how many half-open trials reach it while it is down, counted by the
dependency, with each process's breaker and with the fleet's.

It starts, on loopback, HAProxy (Debian's package) in front of Python's stock
http.server, which is down (HAProxy answers 503) for `--outage` seconds and
then serves; HAProxy's own counter of requests received (its stats page,
read every 100 ms) is the count. 20 client processes (`--processes`), dealt
in turn to the Rust, Go and Python clients' herd examples, send calls
arriving at random, `--rate` a second in all, for `--seconds`, each call
sent once, under bench/real-fleet.yaml's `breakers-process` (each process's
breaker) or `breakers-fleet` (`circuitBreaker.scope: fleet`): 5 failures in
a row open a breaker for 3 s, and half-open lets 3 trials through. Ways:

- per-process breakers (through one daemon, which has no say in them);
- the fleet's breaker through one daemon;
- through 2 daemons behind a loopback Service proxy, without a store
  (each replica runs its own processes' half-open);
- through 2 daemons sharing a real redis-server.

For each it prints the most requests that reached HAProxy in any 3 s window
(`openTimeout`) while it was down, once every breaker had opened (from 2 s
into the outage: every request then is a half-open trial), the requests it
received while down in all, how long after it came back it served 95 % of
the calls arriving (the breakers closed), and the calls served; beside the
last three, the simulator's means over seeds 2001-2020 for the same set-up,
with their spread (one standard deviation over the seeds)
(`simulate --scenario errors`: its requests refused during the outage, when
the last breaker closed after it, the calls served). Target: the fleet's
trials per window at most 2 x halfOpenMaxCalls = 6 through one daemon and
through 2 sharing Redis; exit 1 when not.

Usage: bench/real_breakers.py [--processes N] [--rate R] [--outage S]
       [--seconds S] [--runs N] [--languages L,L,...] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from dependencies import Haproxy
from real_fleet import BINARY, HERDS, POLICY, ROOT, SEEDS, Fleet, build, last_lines

OPEN_TIMEOUT, HALF_OPEN_MAX_CALLS = 3.0, 3
# Every breaker has opened by then: 5 failures at the rate each process sends.
SETTLED = 2.0
# HAProxy's limit: above anything the runs send, so once back it serves all.
UNLIMITED = 100_000
# (label, service, the daemons, simulate's flags for them)
WAYS = [
    ("per-process breakers", "breakers-process", {}, ["--replicas", "1"]),
    ("fleet, 1 daemon", "breakers-fleet", {}, ["--replicas", "1"]),
    ("fleet, 2 daemons, no store", "breakers-fleet", {"replicas": 2}, ["--replicas", "2"]),
    ("fleet, 2 daemons + Redis", "breakers-fleet", {"replicas": 2, "store": True},
     ["--replicas", "2", "--pace-store"]),
]
TARGETED = ("fleet, 1 daemon", "fleet, 2 daemons + Redis")


class Counter:
    """HAProxy's requests received and answered 2xx, read every 100 ms: (t, received, served)."""

    def __init__(self, haproxy):
        self.haproxy, self.samples, self.stopped = haproxy, [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped.wait(0.1):
            stats = self.haproxy.stats()
            self.samples.append((time.time(), stats["received"], stats["accepted"]))

    def stop(self):
        self.stopped.set()
        self.thread.join()
        return self.samples


def received_between(samples, start, end):
    inside = [received for t, received, _ in samples if start <= t <= end]
    return inside[-1] - inside[0] if len(inside) > 1 else 0


def most_in_a_window(samples, start, end, window):
    """The most requests received in any `window` seconds within [start, end]."""
    inside = [(t, received) for t, received, _ in samples if start <= t <= end]
    most = 0
    for i, (t, first) in enumerate(inside):
        last = max(received for u, received in inside[i:] if u <= t + window)
        most = max(most, last - first)
    return most


def back_at(samples, up, rate):
    """Seconds from `up` until a second in which HAProxy served 95 % of `rate`."""
    for i, (t, _, served) in enumerate(samples):
        later = [s for s in samples[i:] if s[0] >= t + 1.0]
        if t >= up and later and later[0][2] - served >= 0.95 * rate * (later[0][0] - t):
            return t - up
    return None


def run(opts, service, fleet_options):
    fleet = Fleet(**fleet_options)
    start_at = int(time.time() * 1000) + 3000
    up = start_at / 1000 + opts.outage
    daemon_url = fleet.start(start_at)
    haproxy = Haproxy(UNLIMITED, up)
    counter = Counter(haproxy)
    python_path = os.path.join(ROOT, "clients", "python")
    environment = {**os.environ, "PYTHONPATH": python_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    herd = []
    try:
        herd = [
            subprocess.Popen(
                [*HERDS[opts.languages[i % len(opts.languages)]], "--daemon", daemon_url, "--service", service,
                 "--instance", f"pod-{i}", "--dependency", haproxy.address, "--start-at", str(start_at),
                 "--rate", str(opts.rate / opts.processes), "--seconds", str(opts.seconds), "--seed", str(i + 1)],
                stdout=subprocess.PIPE, text=True, env=environment)
            for i in range(opts.processes)
        ]
        results = last_lines(herd, 300)
    finally:
        samples = counter.stop()
        for process in herd:
            process.kill()
            process.wait()
        haproxy.stop()
        fleet.stop()
    down_from = start_at / 1000 + SETTLED
    return {
        "trials_per_window": most_in_a_window(samples, down_from, up, OPEN_TIMEOUT),
        "received_while_down": received_between(samples, start_at / 1000, up),
        "back_after_seconds": back_at(samples, up, opts.rate),
        "served": sum(r["succeeded"] for r in results),
        "calls": sum(r["succeeded"] + r["gave_up"] for r in results),
    }


def simulated(opts, service, flags):
    """Means over SEEDS of the simulator's run of the same set-up."""
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", service,
             "--scenario", "errors", "--error-rate", "0", "--rate", str(opts.rate), "--processes",
             str(opts.processes), "--outage", f"{opts.outage}s", "--capacity", str(UNLIMITED),
             "--until", f"{opts.seconds}s", "--latency", "1ms", *flags],
            check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(text))
    closed = [r["breakers_closed_seconds"] for r in runs]
    served = [r["succeeded"] for r in runs]
    spread = lambda values: statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "received_while_down": statistics.mean(r["wasted_during_outage"] for r in runs),
        "back_after_seconds": None if None in closed else statistics.mean(closed),
        "back_after_spread_seconds": None if None in closed else spread(closed),
        "served": statistics.mean(served),
        "served_spread": spread(served),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--rate", type=float, default=400.0, help="calls a second, in all")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the dependency is down")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds the calls arrive for")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--languages", default="rust,go,python")
    parser.add_argument("--json")
    opts = parser.parse_args()
    opts.languages = opts.languages.split(",")
    build(opts.languages)
    print(f"{opts.processes} processes ({', '.join(opts.languages)} in turn), {opts.rate:.0f} calls a second in all "
          f"for {opts.seconds:.0f} s, each sent once; HAProxy down {opts.outage:.0f} s, then serving; "
          f"openTimeout {OPEN_TIMEOUT:.0f} s, halfOpenMaxCalls {HALF_OPEN_MAX_CALLS}; mean of {opts.runs} run(s)")
    print()
    print(f"{'':28} {'trials per window':>17} {'received down':>15} {'back after, s':>21} {'served':>21}")
    print(f"{'':28} {'real':>17} {'real':>7} {'sim':>7} {'real':>7} {'sim':>7} {'±':>5} {'real':>7} {'sim':>7} {'±':>5}")
    report, met = {}, True
    seconds = lambda value: "never" if value is None else f"{value:.2f}"
    for label, service, fleet_options, sim_flags in WAYS:
        runs = [run(opts, service, fleet_options) for _ in range(opts.runs)]
        sim = simulated(opts, service, sim_flags)
        report[label] = {"real": runs, "simulated": sim}
        mean = lambda key: sum(r[key] for r in runs) / len(runs)
        backs = [r["back_after_seconds"] for r in runs]
        back = None if None in backs else sum(backs) / len(backs)
        worst = max(r["trials_per_window"] for r in runs)
        print(f"{label:28} {mean('trials_per_window'):9.1f} (max {worst:2}) "
              f"{mean('received_while_down'):7,.0f} {sim['received_while_down']:7,.0f} "
              f"{seconds(back):>7} {seconds(sim['back_after_seconds']):>7} "
              f"{'' if sim['back_after_spread_seconds'] is None else format(sim['back_after_spread_seconds'], '.2f'):>5} "
              f"{mean('served'):7,.0f} {sim['served']:7,.0f} {sim['served_spread']:5,.0f}")
        if label in TARGETED:
            met &= worst <= 2 * HALF_OPEN_MAX_CALLS
    print()
    print(f"the fleet's trials per window at most {2 * HALF_OPEN_MAX_CALLS}: {'met' if met else 'NOT MET'}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
