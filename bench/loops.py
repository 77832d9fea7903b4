#!/usr/bin/env python3
"""The fleet's pacing across slow links to the daemon, in the simulator: the
herd (1000 callers, 200/s, 10 s outage, 1 ms latency, 50 processes) on each
dependency model, paced through one daemon whose round trip to the processes
is 20 ms to 2 s (`simulate --feedback-delay`), beside per-process gates and
plain full jitter, which no daemon paces.

Target for each model and delay: the fleet's p99 no more than 0.3 s behind
per-process gates', and never behind full jitter's. Across a round trip
longer than a process waits for its grant (500 ms) the processes hear no
grant and their gates pace alone.

The policies are bench/real-fleet.yaml's `herd-jittered` (full jitter,
retried until success) and `herd-gated` (the same with the gate as shipped).
Seeds are N (20 unless given) from 2001, kept for reports (tune on others
with `--first-seed`); cells are means ± one standard deviation. Prints a
table and exits 1 if a target is missed.

Usage: bench/loops.py [--binary PATH] [--seeds N] [--first-seed S] [--models M,M] [--delays D,D]
Needs a release build (cargo build --release).
"""
import argparse
import concurrent.futures
import os

from worlds import MODELS, NO_GATE, finish, means, seed_flags, seeds_of

DELAYS = ["20ms", "100ms", "200ms", "300ms", "500ms", "1s", "2s"]
GATED = ["--service", "herd-gated"]
# Gates and full jitter hear no daemon, so the delay changes nothing for them.
ALONE = {"full jitter": NO_GATE, "gates": [*GATED, "--no-fleet-pacing"]}
MARGIN = 0.3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/stormguard")
    seed_flags(parser)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--delays", default=",".join(DELAYS))
    args = parser.parse_args()
    seeds = seeds_of(args)
    missed = 0
    cell = lambda r: f"{r['p99']:6.2f}±{r['p99 spread']:.2f}"
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for model in args.models.split(","):
            herd = ["--processes", "50", "--latency", "1ms", "--dependency", model]
            alone = {name: means(pool, args.binary, [*herd, *flags], seeds) for name, flags in ALONE.items()}
            print(f"{model}: full jitter {cell(alone['full jitter'])} s, gates {cell(alone['gates'])} s")
            print(f"  {'round trip':>10} {'fleet p99 s':>14}  target (<= gates + {MARGIN} s, <= full jitter)")
            for delay in args.delays.split(","):
                fleet = means(pool, args.binary, [*herd, *GATED, "--replicas", "1", "--feedback-delay", delay], seeds)
                ok = fleet["p99"] <= alone["gates"]["p99"] + MARGIN and fleet["p99"] <= alone["full jitter"]["p99"]
                missed += not ok
                print(f"  {delay:>10} {cell(fleet):>14}  {'met' if ok else 'NOT MET'}")
    finish(missed)


if __name__ == "__main__":
    main()
