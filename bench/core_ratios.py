#!/usr/bin/env python3
"""Runs stormguard-core's divan benchmarks several times and prints, for each
pair that does the same job, the median time of ours, of the reference
(backon, tower) and their ratio (below 1: ours is faster). Both sides of a
pair are measured in the same run; the ratio is taken per run, so a noisy
neighbour slowing one run down does not skew it.

Usage: bench/core_ratios.py [rounds, default 5]   (from the repository root)
"""
import re
import statistics
import subprocess
import sys

PAIRS = [
    ("delay/exponential", "delay/backon_exponential"),
    ("delay/full_jitter", "delay/backon_exponential_jitter"),
    ("delay/equal_jitter", "delay/backon_exponential_jitter"),
    ("delay/decorrelated_jitter", "delay/backon_exponential_jitter"),
    ("delay/proportional_jitter", "delay/backon_exponential_jitter"),
    ("delay/explicit_delays", "delay/backon_exponential"),
    ("budget/retry_budget/t=1", "budget/tower_tps_budget/t=1"),
    ("budget/retry_budget/t=2", "budget/tower_tps_budget/t=2"),
    ("budget/retry_throttle/t=1", "budget/tower_tps_budget/t=1"),
    ("budget/retry_throttle/t=2", "budget/tower_tps_budget/t=2"),
]
# (with, without): what the first adds to the second, in ns.
DIFFS = [("call/gate_off", "call/without_gate")]
ALONE = ["breaker/permit_and_record/t=1", "breaker/permit_and_record/t=2", "clock/tokio_now"]
UNITS = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
ROW = re.compile(r"^([│ ]*)[├╰]─ (\S+)\s+(?:(\S+) (\S+)\s+│\s+\S+ \S+\s+│\s+(\S+) (\S+))?")


def run_once():
    """Median ns of every benchmark in one `cargo bench` run, keyed by path."""
    out = subprocess.run(
        ["cargo", "bench", "--quiet", "-p", "stormguard-core", "--bench", "core", "--", "--sample-count", "300", "--sample-size", "2000"],
        check=True, capture_output=True, text=True,
    ).stdout
    medians, stack = {}, []
    for line in out.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        depth = len(m.group(1)) // 3
        stack[depth:] = [m.group(2)]
        if m.group(5):
            medians["/".join(stack)] = float(m.group(5)) * UNITS[m.group(6)]
    return medians


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs = [run_once() for _ in range(rounds)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{rounds} runs; ns per item (delays: per delay of a 10-delay schedule), median of the runs' medians;")
    print("ratio = ours / reference within each run: median [lowest, highest]; below 1 means ours is faster")
    for ours, theirs in PAIRS:
        scale = 10 if ours.startswith("delay/") else 1
        ratios = sorted(r[ours] / r[theirs] for r in runs)
        print(
            f"{ours:30} {med[ours] / scale:7.1f}  {theirs:32} {med[theirs] / scale:7.1f}"
            f"  ratio {statistics.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]"
        )
    for with_it, without in DIFFS:
        added = sorted(r[with_it] - r[without] for r in runs)
        print(
            f"{with_it:30} {med[with_it]:7.1f}  {without:32} {med[without]:7.1f}"
            f"  adds {statistics.median(added):.1f} ns [{added[0]:.1f}, {added[-1]:.1f}]"
        )
    for name in ALONE:
        print(f"{name:30} {med[name]:7.1f}")


if __name__ == "__main__":
    main()
