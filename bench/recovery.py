#!/usr/bin/env python3
"""Recovery control in the herd simulator: what the send gate does to a
herd returning to a recovering server, against the targets, as means over
seeds 1-5.

Each row runs `stormguard simulate --json` for seeds 1-5 and prints the
means of wasted requests (rejected), p99 time to success and clients that
gave up, beside the target and whether it holds.

Usage: bench/recovery.py [--binary PATH] [--latency D]
Needs a release build (cargo build --release).
"""
import argparse
import json
import statistics
import subprocess
import sys

SEEDS = range(1, 6)


def run(binary, args):
    """Means over SEEDS of one simulate invocation's figures."""
    runs = []
    for seed in SEEDS:
        out = subprocess.run(
            [binary, "simulate", "--json", "--seed", str(seed), *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(out))
    mean = lambda key: statistics.mean(r[key] for r in runs)
    return mean("wasted"), mean("p99_seconds"), mean("gave_up")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/stormguard")
    parser.add_argument("--latency", default="0s")
    parser.add_argument("extra", nargs="*", help="more simulate flags for every row")
    opts = parser.parse_args()
    common = ["--latency", opts.latency, *opts.extra]
    rows = [
        # (label, flags, max wasted, max p99 seconds)
        ("default herd, full jitter", [], None, None),
        ("default herd, 1 process, gate", ["--gate", "--processes", "1"], 1100, 14.5),
        ("default herd, 50 processes, gates", ["--gate", "--processes", "50"], None, None),
        ("default herd, 50 processes, fleet", ["--fleet", "--processes", "50"], 1200, 15.5),
        ("default herd, 200 processes, gates", ["--gate", "--processes", "200"], None, None),
        ("default herd, 200 processes, fleet", ["--fleet", "--processes", "200"], 1200, 15.5),
        ("200 processes, fleet, 2 replicas", ["--fleet", "--processes", "200", "--replicas", "2"], None, None),
        ("200 processes, fleet, 3 replicas", ["--fleet", "--processes", "200", "--replicas", "3"], None, None),
    ]
    print(f"means over seeds {SEEDS.start}-{SEEDS.stop - 1}, latency {opts.latency}; fleet rows: 100 ms feedback delay")
    print(f"{'scenario':40} {'wasted':>8} {'p99 s':>7} {'gave up':>8}  target")
    failed = False
    for label, flags, max_wasted, max_p99 in rows:
        wasted, p99, gave_up = run(opts.binary, [*flags, *common])
        verdict = ""
        if max_wasted is not None:
            ok = wasted <= max_wasted and p99 <= max_p99 and gave_up == 0
            failed |= not ok
            verdict = f"≤ {max_wasted:,} wasted, p99 ≤ {max_p99} s, none gave up: {'met' if ok else 'NOT MET'}"
        print(f"{label:40} {wasted:8,.0f} {p99:7.2f} {gave_up:8.1f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
