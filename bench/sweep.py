#!/usr/bin/env python3
"""Whether the fleet's pacing ever makes a herd's recovery worse than going
without it, in the simulator, across the worlds an operator may be in.

The herd: callers that each want one call served, full jitter (100 ms x
2^attempt, capped at 10 s) retried until success, returning to a dependency
that was down. Three ways: plain full jitter, per-process gates, and the
gate paced by the fleet (bench/real-fleet.yaml's `herd-jittered` and
`herd-gated`, as shipped). Two parts:
- the grid: each dependency model (quota, token bucket of a second's burst,
  worker pool, request-rate limit) x capacity 10, 200, 2,000 and 20,000 a
  second x the processes' round trip to the daemon (20 ms, 300 ms, 1 s,
  2 s) x one daemon, two replicas alone and two sharing a store; 50
  processes, callers 5 s of capacity, 10 s outage, 1 ms latency. Target in
  every cell: the fleet's p99 time to success no more than 0.3 s behind
  per-process gates', and never behind full jitter's;
- random worlds, drawn from `--world-seed`: capacity 5 to 50,000 a second
  and 1 to 2,000 processes (log-uniform), round trip 0 to 2 s, outage 1 s
  to 10 min (log-uniform), any model, any of the three pacings, callers 1 to
  10 s of capacity (at most 100,000). The property in every world: the
  fleet's p99 no more than the worse of the other two ways' plus 0.3 s and
  2 % of that worse p99 (the spread of a mean over the seeds at the longest
  outages): the fleet is never the reason a recovery is slower than an
  operator would get without the daemon.
A world where no way serves anything (a worker pool too slow for the
policy's per-try timeout) is reported, not judged; one where the fleet
serves fewer callers than either other way misses.

Cells are means over seeds from 2001 (kept for reports: no tuning looks at
them) unless `--first-seed` says otherwise. Prints both tables and exits 1
if any world misses.

Usage: bench/sweep.py [--binary PATH] [--seeds N] [--first-seed S] [--worlds N]
       [--world-seed S] [--no-grid]
Needs a release build (cargo build --release).
"""
import argparse
import concurrent.futures
import itertools
import math
import os
import random

from worlds import MODELS, NO_GATE, finish, means, seed_flags, seeds_of

CAPACITIES = [10, 200, 2_000, 20_000]
ROUND_TRIPS = ["20ms", "300ms", "1s", "2s"]
PACING = {"1 daemon": ["--replicas", "1"], "2 alone": ["--replicas", "2"],
          "2 + store": ["--replicas", "2", "--pace-store"]}
GATED = ["--service", "herd-gated"]
ALONE = {"full jitter": NO_GATE, "gates": [*GATED, "--no-fleet-pacing"]}
# The random worlds' margin over the worse of gates and full jitter.
MARGIN_SECONDS, MARGIN_SHARE = 0.3, 0.02
# The grid's margin over per-process gates.
GATES_MARGIN = 0.3
# Served shares this close count as the same (a caller or two at the horizon).
SERVED_MARGIN = 0.005
# The largest herd a random world draws: the bench's time goes on these.
MOST_CALLERS = 100_000


def margin(worse):
    return MARGIN_SECONDS + MARGIN_SHARE * worse


def served_none(*ways):
    return all(way["served"] == 0 for way in ways)


def served_less(fleet, alone):
    """Whether the fleet served fewer callers than another way, by more than
    SERVED_MARGIN."""
    return any(fleet["served"] < way["served"] - SERVED_MARGIN for way in alone.values())


def judge(pool, binary, world, fleet_flags, seeds, alone=None):
    """The world's three ways (`alone`: gates and full jitter already run)
    and the property: (fleet, alone, worse, met); met is None where no way
    serves anything."""
    if alone is None:
        alone = {name: means(pool, binary, [*world, *flags], seeds) for name, flags in ALONE.items()}
    fleet = means(pool, binary, [*world, *GATED, *fleet_flags], seeds)
    worse = max(alone["gates"]["p99"], alone["full jitter"]["p99"])
    if served_none(fleet, *alone.values()):
        return fleet, alone, worse, None
    return fleet, alone, worse, fleet["p99"] <= worse + margin(worse) and not served_less(fleet, alone)


def within_gates(fleet, alone):
    """The grid's target: no more than GATES_MARGIN behind per-process
    gates, never behind full jitter, serving no fewer."""
    if served_none(fleet, *alone.values()):
        return None
    return (fleet["p99"] <= alone["gates"]["p99"] + GATES_MARGIN
            and fleet["p99"] <= alone["full jitter"]["p99"] and not served_less(fleet, alone))


def grid(pool, binary, seeds):
    missed = 0
    print("the grid: 50 processes, callers 5 s of capacity, 10 s outage, 1 ms latency; fleet p99 by round trip")
    print(f"target: <= per-process gates + {GATES_MARGIN} s and <= full jitter")
    print(f"{'model':13} {'capacity/s':>10} {'gates':>7} {'jitter':>7}  {'pacing':10} "
          + " ".join(f"{trip:>7}" for trip in ROUND_TRIPS) + "  target")
    for model, capacity in itertools.product(MODELS, CAPACITIES):
        world = ["--capacity", str(capacity), "--clients", str(capacity * 5), "--processes", "50",
                 "--latency", "1ms", "--dependency", model]
        alone = {name: means(pool, binary, [*world, *flags], seeds) for name, flags in ALONE.items()}
        row = f"{model:13} {capacity:>10,} {alone['gates']['p99']:7.2f} {alone['full jitter']['p99']:7.2f}"
        if served_none(*alone.values()):
            print(f"{row}  none served by gates or full jitter (reported)")
            continue
        for pacing, flags in PACING.items():
            cells, met = [], True
            for trip in ROUND_TRIPS:
                fleet = means(pool, binary, [*world, *GATED, *flags, "--feedback-delay", trip], seeds)
                ok = within_gates(fleet, alone) is not False
                cells.append(f"{fleet['p99']:6.2f}{' ' if ok else '!'}")
                met &= ok
            missed += not met
            print(f"{row}  {pacing:10} " + " ".join(cells) + f"  {'met' if met else 'NOT MET'}")
    print("(! marks a round trip that misses)")
    return missed


def draw(rng):
    """One random world: its description and its simulate flags."""
    log_uniform = lambda low, high: math.exp(rng.uniform(math.log(low), math.log(high)))
    capacity = round(log_uniform(5, 50_000))
    callers = max(1, min(MOST_CALLERS, round(capacity * rng.uniform(1, 10))))
    processes = max(1, min(callers, round(log_uniform(1, 2_000))))
    trip = round(rng.uniform(0, 2), 2)
    outage = round(log_uniform(1, 600), 1)
    model = rng.choice(MODELS)
    pacing = rng.choice(list(PACING))
    world = ["--capacity", str(capacity), "--clients", str(callers), "--processes", str(processes),
             "--outage", f"{outage}s", "--latency", "1ms", "--dependency", model]
    what = (f"{model:13} {capacity:>7,}/s {callers:>8,} {processes:>6,} {trip:>6.2f}s {outage:>7.1f}s "
            f"{pacing:10}")
    return what, world, [*PACING[pacing], "--feedback-delay", f"{trip}s"]


def random_worlds(pool, binary, seeds, count, world_seed):
    missed = 0
    print()
    print(f"random worlds (drawn from world seed {world_seed}); property: fleet p99 <= max(per-process gates, "
          f"full jitter) + {MARGIN_SECONDS} s + {MARGIN_SHARE:.0%} of it")
    print(f"{'model':13} {'capacity':>9} {'callers':>8} {'procs':>6} {'trip':>7} {'outage':>8} {'pacing':10} "
          f"{'fleet':>7} {'gates':>7} {'jitter':>7}  target")
    rng = random.Random(world_seed)
    for _ in range(count):
        what, world, fleet_flags = draw(rng)
        fleet, alone, worse, ok = judge(pool, binary, world, fleet_flags, seeds)
        missed += ok is False
        verdict = "none served (reported)" if ok is None else f"<= {worse + margin(worse):.2f}: " + (
            "met" if ok else "NOT MET")
        print(f"{what} {fleet['p99']:7.2f} {alone['gates']['p99']:7.2f} {alone['full jitter']['p99']:7.2f}  "
              f"{verdict}")
    return missed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/stormguard")
    seed_flags(parser)
    parser.add_argument("--worlds", type=int, default=40)
    parser.add_argument("--world-seed", type=int, default=1)
    parser.add_argument("--no-grid", action="store_true")
    args = parser.parse_args()
    seeds = seeds_of(args)
    missed = 0
    print(f"means over seeds {seeds.start}-{seeds.stop - 1}; p99 in seconds")
    print()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        if not args.no_grid:
            missed += grid(pool, args.binary, seeds)
        missed += random_worlds(pool, args.binary, seeds, args.worlds, args.world_seed)
    finish(missed)


if __name__ == "__main__":
    main()
