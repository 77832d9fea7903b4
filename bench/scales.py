#!/usr/bin/env python3
"""The fleet's herd at every scale, in the simulator: a dependency of 10,
200, 2,000 and 20,000 requests a second, down for 10 s, with 5 s of its
capacity waiting to be served (50, 1,000, 10,000 and 100,000 callers), 50
processes paced through one daemon and through 2 replicas sharing a store,
1 ms latency, on each dependency model.

The even-sender limit is when the last of the p99 callers would be served if
every caller were paced evenly from the end of the outage: 10 s + 0.99 x 5 s.
Targets: fleet p99 within 0.5 s of it on a quota and a token bucket (burst
of a second's capacity), within 1.0 s on a request-rate limit (one that
counts what it refuses); a worker pool is reported, not judged.

The policy is bench/real-fleet.yaml's `herd-gated` (full jitter, retried
until success, the gate as shipped). Seeds are N (20 unless given) from
2001, kept for reports (tune on others with `--first-seed`); cells are
means ± one standard deviation. Prints a table and
exits 1 if a target is missed.

Usage: bench/scales.py [--binary PATH] [--seeds N] [--first-seed S] [--models M,M]
Needs a release build (cargo build --release).
"""
import argparse
import concurrent.futures
import itertools
import os

from worlds import MODELS, finish, means, seed_flags, seeds_of

CAPACITIES = [10, 200, 2_000, 20_000]
SECONDS_WAITING = 5
OUTAGE = 10.0
MARGIN = {"quota": 0.5, "token-bucket": 0.5, "request-rate": 1.0}
PACING = {"1 daemon": ["--replicas", "1"], "2 + store": ["--replicas", "2", "--pace-store"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/stormguard")
    seed_flags(parser)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    seeds = seeds_of(args)
    missed = 0
    print(f"{'model':14} {'pacing':10} {'capacity/s':>10} {'callers':>8} {'limit s':>8} {'fleet p99 s':>14} "
          f"{'behind':>7}  target")
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for model, (pacing, flags), capacity in itertools.product(args.models.split(","), PACING.items(),
                                                                  CAPACITIES):
            callers = capacity * SECONDS_WAITING
            limit = OUTAGE + 0.99 * SECONDS_WAITING
            world = ["--capacity", str(capacity), "--clients", str(callers), "--processes", "50",
                     "--latency", "1ms", "--dependency", model, "--service", "herd-gated", *flags]
            fleet = means(pool, args.binary, world, seeds)
            row = f"{model:14} {pacing:10} {capacity:>10,} {callers:>8,} {limit:>8.2f}"
            if fleet["served"] == 0:
                # A worker pool of 20 at 10 a second takes 2 s a request,
                # the policy's perTryTimeout: nothing is ever served.
                print(f"{row} {'none served':>14}")
                missed += model in MARGIN
                continue
            behind = fleet["p99"] - limit
            margin = MARGIN.get(model)
            verdict = "(reported)" if margin is None else ("met" if behind <= margin else "NOT MET")
            missed += verdict == "NOT MET"
            print(f"{row} {fleet['p99']:>8.2f}±{fleet['p99 spread']:.2f} {behind:>+7.2f}  {verdict}")
    finish(missed)


if __name__ == "__main__":
    main()
