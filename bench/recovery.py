#!/usr/bin/env python3
"""Recovery control in the herd simulator: what the send gate does to a
herd returning to a recovering server, against the targets, as means over
seeds.

Each row runs `stormguard simulate --json` for each seed (20 from 2001,
kept for reports, unless given) and prints the means of wasted requests
(rejected), p99 time to success (± one standard deviation over the seeds)
and clients that gave up, beside the target and whether it holds.

Usage: bench/recovery.py [--binary PATH] [--latency D] [--seeds N] [--first-seed S]
Needs a release build (cargo build --release).
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys

from worlds import REPORT_SEEDS, REPORT_SEEDS_FROM, seed_flags, seeds_of

SEEDS = range(REPORT_SEEDS_FROM, REPORT_SEEDS_FROM + REPORT_SEEDS)


def runs(binary, args):
    """One simulate invocation's JSON per seed of SEEDS, through one daemon
    unless `args` say how many replicas."""
    one_daemon = [] if "--replicas" in args else ["--replicas", "1"]

    def one(seed):
        command = [binary, "simulate", "--json", "--seed", str(seed), *one_daemon, *args]
        return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, SEEDS))


class P99(float):
    """A mean p99 over the seeds, printed with its spread."""

    def __new__(cls, values):
        p99 = super().__new__(cls, statistics.mean(values))
        p99.spread = statistics.stdev(values) if len(values) > 1 else 0.0
        return p99

    def __format__(self, spec):
        width = int(spec.split(".")[0] or 0)
        return f"{float(self):.2f}±{self.spread:.2f}".rjust(width)


def run(binary, args):
    """Means over SEEDS of wasted requests, p99 time to success (with its
    spread), gave up."""
    results = runs(binary, args)
    mean = lambda key: statistics.mean(r[key] for r in results)
    return mean("wasted"), P99([r["p99_seconds"] for r in results]), mean("gave_up")


def limits(clients, capacity, outage, spread):
    """The scenario's physical limits: the first tries that fall in the
    outage (all wasted whatever the policy), and the p99 time to success of
    an oracle that serves, first come first served, each calendar second's
    capacity at the start of that second from the end of the outage."""
    starts = [spread * (i + 0.5) / clients for i in range(clients)]
    wasted = sum(1 for s in starts if s < outage)
    times = sorted(max(start, outage + k // capacity) - start for k, start in enumerate(starts))
    return wasted, times[int(0.99 * len(times)) - 1]


def replicas(binary, common):
    """Daemon replicas, alone and sharing their pace through a store, against
    one daemon and per-process gates; whether any target is missed."""
    print()
    print("daemon replicas (processes dealt round-robin); with a store: within 0.2 s of one daemon's p99")
    print("(0.5 s at a 20 ms store round trip) and at most 1.1x its waste; alone: p99 no worse than gates;")
    print("the store lost for good 1 s into the recovery (Redis killed at 11 s): p99 no worse than alone")
    print(f"{'processes, replicas':40} {'wasted':>8} {'p99 s':>11}  target")
    failed = False
    for processes in ["50", "200"]:
        base = ["--processes", processes, *common]
        one_wasted, one_p99, _ = run(binary, ["--fleet", *base])
        gates_wasted, gates_p99, _ = run(binary, ["--gate", *base])
        print(f"{processes + ', per-process gates':40} {gates_wasted:8,.0f} {gates_p99:11.2f}")
        print(f"{processes + ', one daemon':40} {one_wasted:8,.0f} {one_p99:11.2f}")
        for count in ["2", "3"]:
            rows = [
                (f"{count} alone", [], None),
                (f"{count}, store 1 ms", ["--pace-store", "--store-delay", "1ms"], 0.2),
                (f"{count}, store 20 ms", ["--pace-store", "--store-delay", "20ms"], 0.5),
                (f"{count}, store lost at 11 s", ["--pace-store", "--store-lost-at", "11s"], "alone"),
            ]
            for label, flags, within in rows:
                wasted, p99, _ = run(binary, ["--fleet", "--replicas", count, *flags, *base])
                if within is None:
                    alone_p99 = p99
                    ok = p99 <= gates_p99
                    goal = f"p99 <= gates' {gates_p99:.2f}"
                elif within == "alone":
                    ok = p99 <= alone_p99
                    goal = f"p99 <= alone's {alone_p99:.2f}"
                else:
                    ok = p99 <= one_p99 + within and wasted <= 1.1 * one_wasted
                    goal = f"p99 <= {one_p99 + within:.2f}, wasted <= {1.1 * one_wasted:,.0f}"
                failed |= not ok
                print(f"{processes + ', ' + label:40} {wasted:8,.0f} {p99:11.2f}  {goal}: {'met' if ok else 'NOT MET'}")
    return failed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/stormguard")
    parser.add_argument("--latency", default="0s")
    parser.add_argument("extra", nargs="*", help="more simulate flags for every row")
    seed_flags(parser)
    opts = parser.parse_args()
    global SEEDS
    SEEDS = seeds_of(opts)
    common = ["--latency", opts.latency, *opts.extra]
    rows = [
        # (label, flags, max wasted, max p99 seconds)
        ("default herd, full jitter", [], None, None),
        ("default herd, 1 process, gate", ["--gate", "--processes", "1"], 1100, 14.5),
        ("default herd, 50 processes, gates", ["--gate", "--processes", "50"], None, None),
        ("default herd, 50 processes, fleet", ["--fleet", "--processes", "50"], 1200, 15.5),
        ("default herd, 200 processes, gates", ["--gate", "--processes", "200"], None, None),
        ("default herd, 200 processes, fleet", ["--fleet", "--processes", "200"], 1200, 15.5),
    ]
    print(f"means over seeds {SEEDS.start}-{SEEDS.stop - 1}, latency {opts.latency}; fleet rows: 100 ms feedback delay")
    print()
    print(f"{'scenario':40} {'wasted':>8} {'p99 s':>11} {'gave up':>8}  target")
    failed = False
    for label, flags, max_wasted, max_p99 in rows:
        wasted, p99, gave_up = run(opts.binary, [*flags, *common])
        verdict = ""
        if max_wasted is not None:
            ok = wasted <= max_wasted and p99 <= max_p99 and gave_up == 0
            failed |= not ok
            verdict = f"≤ {max_wasted:,} wasted, p99 ≤ {max_p99} s, none gave up: {'met' if ok else 'NOT MET'}"
        print(f"{label:40} {wasted:8,.0f} {p99:11.2f} {gave_up:8.1f}  {verdict}")

    failed |= replicas(opts.binary, common)

    print()
    print("other scenarios, 50 processes, fleet: within 1.2x of the least waste and 1.5 s of the p99 limit")
    print(f"{'scenario':40} {'wasted':>8} {'least':>7} {'p99 s':>11} {'limit':>7}  target")
    for label, outage, spread in [("outage 2 s", 2, 0), ("outage 60 s", 60, 0), ("first failures over 10 s", 10, 10)]:
        flags = ["--fleet", "--processes", "50", "--outage", f"{outage}s", "--spread", f"{spread}s", *common]
        wasted, p99, gave_up = run(opts.binary, flags)
        least, limit = limits(1000, 200, outage, spread)
        ok = wasted <= 1.2 * least and p99 <= limit + 1.5 and gave_up == 0
        failed |= not ok
        print(f"{label:40} {wasted:8,.0f} {least:7,} {p99:11.2f} {limit:7.2f}  {'met' if ok else 'NOT MET'}")

    print()
    print("brownout: 100 arrivals a second over 60 s, 200/s capacity, 50/s from 20 s to 40 s;")
    print("refused during the brownout, as a share of the arrivals above the reduced capacity (target: at most 10 %)")
    for label, mode in [("per-process gates", "--gate"), ("fleet", "--fleet"), ("full jitter", None)]:
        flags = ["--processes", "50", "--clients", "6000", "--spread", "60s", "--outage", "0s",
                 "--brownout", "20s:20s:50", *common] + ([mode] if mode else [])
        refused = statistics.mean(
            sum(q - a for q, a in zip(r["requests_per_second"][20:40], r["accepted_per_second"][20:40]))
            for r in runs(opts.binary, flags)
        )
        excess_demand = (100 - 50) * 20
        share = refused / excess_demand
        verdict = ""
        if mode == "--fleet":
            ok = share <= 0.10
            failed |= not ok
            verdict = "met" if ok else "NOT MET"
        print(f"{label:40} refused {refused:7,.0f} = {share:6.1%} of {excess_demand:,}  {verdict}")

    print()
    print("collapse (Brooker's model: 40/s, 80/s from 20 s to 25 s, 3 s timeouts, 3 tries at once, 20 processes);")
    print("mean goodput from 35 s to 75 s (offered: 40/s), and the first second from 25 s on with goodput >= 36 for 5 s in a row;")
    print("target for gates and fleet: back, on average, within 10 s of the spike's end")
    for label, flags, judged in [
        ("3 tries", [], False),
        ("no retries", ["--max-retries", "0"], False),
        ("3 tries, gates", ["--gate"], True),
        ("3 tries, fleet", ["--fleet"], True),
    ]:
        results = runs(opts.binary, ["--scenario", "collapse", "--processes", "20", *flags])
        goodput = statistics.mean(sum((r["goodput_per_second"] + [0] * 80)[35:75]) / 40 for r in results)
        def back(r):
            g = r["goodput_per_second"] + [0] * 90
            return next((s for s in range(25, 80) if all(x >= 36 for x in g[s:s + 5])), None)
        backs = [back(r) for r in results]
        verdict = ""
        if judged:
            after = [b - 25 if b is not None else float("inf") for b in backs]
            ok = statistics.mean(after) <= 10
            failed |= not ok
            verdict = f"back {statistics.mean(after):.1f} s after the spike: {'met' if ok else 'NOT MET'}"
        print(f"{label:40} goodput {goodput:5.1f}/s  back at {backs}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
