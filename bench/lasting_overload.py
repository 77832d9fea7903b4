#!/usr/bin/env python3
"""A dependency back from an outage with less than its callers want, for as
long as it lasts, simulated on seeds no tuning used (mean ± one standard
deviation): 800 calls a second from 160 processes, down 30 s, then taking
150 a second (a quota) while calls arrive until 90 s, room for 9,000 calls
after the outage. Each set-up with the shipped defaults of what it turns on.

Columns: calls served from the end of the outage to 90 s, as a share of the
9,000 the dependency could take; the 99th percentile time to success of the
calls that began a second or more after it; the 99th percentile time the
calls shed (or refused by their breaker) before sending anything took to
fail; calls shed; half-open trials per openTimeout. With classes, each
class's share served of the calls that began a second or more after the
outage, and their p99.

`--before PATH` also runs an earlier build on the same seeds and prints the
set-ups side by side by what both report: calls served from the end of the
outage to 90 s, and the p99 time to success of every call served (an
earlier build has no figures after the first second back).

    python3 bench/lasting_overload.py [--seeds 2001-2020] [--binary PATH] [--before PATH]
"""

import argparse
from concurrent.futures import ThreadPoolExecutor

from fleet_breakers import run as simulated, seeds, spread

WORLD = ["--scenario", "errors", "--error-rate", "0", "--processes", "160", "--outage", "30s",
         "--capacity", "150", "--until", "90s", "--replicas", "1"]
ROOM = 9000.0

ROWS = [
    ("breakers per process", ["--rate", "800", "--breaker"]),
    ("the fleet's breaker", ["--rate", "800", "--fleet-breaker"]),
    ("gates, each process alone", ["--rate", "800", "--gate"]),
    ("gates paced by the fleet", ["--rate", "800", "--fleet"]),
    ("gates paced by the fleet, breakers per process", ["--rate", "800", "--fleet", "--breaker"]),
    ("gates paced by the fleet, the fleet's breaker", ["--rate", "800", "--fleet", "--fleet-breaker"]),
]

CLASSES = [
    ("800/s: a sixth critical (133/s), a third sheddable", ["--rate", "800", "--fleet", "--critical", "0.1667",
                                                              "--sheddable", "0.3333"]),
    ("400/s: a third each (critical 133/s)", ["--rate", "400", "--fleet", "--critical", "0.3333",
                                              "--sheddable", "0.3333"]),
    ("300/s: a third each (critical 100/s)", ["--rate", "300", "--fleet", "--critical", "0.3333",
                                              "--sheddable", "0.3333"]),
    ("800/s: a third each (critical 267/s, above capacity)", ["--rate", "800", "--fleet", "--critical", "0.3333",
                                                               "--sheddable", "0.3333"]),
]


def served_in_room(result):
    """Calls served from the end of the outage (30 s) until calls stop (90 s)."""
    return sum(result["goodput_per_second"][30:90])


def run(binary, args, seed):
    return simulated(binary, [*WORLD, *args], seed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="2001-2020")
    parser.add_argument("--binary", default="target/release/stormguard")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--before", help="an earlier build to run side by side")
    options = parser.parse_args()
    with ThreadPoolExecutor(options.jobs) as pool:
        def runs(args, binary=options.binary):
            return list(pool.map(lambda seed: run(binary, args, seed), seeds(options.seeds)))

        if options.before:
            print("| set-up | served of 9,000: before | after | p99 of every call served: before | after |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for name, args in ROWS:
                before, after = runs(args, options.before), runs(args)
                served = lambda results: spread([served_in_room(r) / ROOM for r in results], 1, 100, " %")
                p99 = lambda results: spread([r["p99_seconds"] for r in results], 2, 1, " s")
                print(f"| {name} | {served(before)} | {served(after)} | {p99(before)} | {p99(after)} |", flush=True)
            print()

        print("| set-up | served of 9,000 | p99 after the first second back | fail-fast p99 | shed | trials per openTimeout |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, args in ROWS:
            results = runs(args)
            print(f"| {name} "
                  f"| {spread([r['served_after_outage'] / ROOM for r in results], 1, 100, ' %')} "
                  f"| {spread([r['p99_after_recovery_seconds'] for r in results], 3, 1, ' s')} "
                  f"| {spread([r['fail_fast_p99_seconds'] for r in results], 3, 1, ' s')} "
                  f"| {spread([r['gave_up_shed'] for r in results], 0)} "
                  f"| {spread([r['half_open_trials_per_window'] for r in results], 0)} |", flush=True)
        print()
        print("| classes | served of 9,000 | critical served | default served | sheddable served | critical p99 | default p99 |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, args in CLASSES:
            results = runs(args)
            share = lambda r, i: r["classes"][i]["served_share_after_recovery"]
            p99 = lambda r, i: r["classes"][i]["p99_after_recovery_seconds"]
            print(f"| {name} "
                  f"| {spread([r['served_after_outage'] / ROOM for r in results], 1, 100, ' %')} "
                  f"| {spread([share(r, 0) for r in results], 2, 100, ' %')} "
                  f"| {spread([share(r, 1) for r in results], 1, 100, ' %')} "
                  f"| {spread([share(r, 2) for r in results], 1, 100, ' %')} "
                  f"| {spread([p99(r, 0) for r in results], 2, 1, ' s')} "
                  f"| {spread([p99(r, 1) for r in results], 2, 1, ' s')} |", flush=True)


if __name__ == "__main__":
    main()
