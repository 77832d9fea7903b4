#!/usr/bin/env python3
"""The fleet breaker beside breakers that each decide alone, simulated on
seeds no tuning used (mean ± one standard deviation): trials per
openTimeout while the dependency is down, when the last breaker closed,
and calls served. Two worlds: 1,000 calls a second from 200 processes
against a dependency down 40 s that then takes 200 a second, and 400 a
second from 20 processes against one wholly back after 40 s.

    python3 bench/fleet_breakers.py [--seeds 2001-2020] [--binary PATH]
"""

import argparse
import json
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor

CAPPED = ["--scenario", "errors", "--error-rate", "0", "--rate", "1000", "--processes", "200",
          "--outage", "40s", "--capacity", "200", "--until", "120s"]
WHOLE = ["--scenario", "errors", "--error-rate", "0", "--rate", "400", "--processes", "20",
         "--outage", "40s", "--until", "80s"]

ROWS = [
    ("capped", "`--breaker`: each process alone", CAPPED + ["--breaker", "--replicas", "1"]),
    ("capped", "`--fleet-breaker`", CAPPED + ["--fleet-breaker", "--replicas", "1"]),
    ("capped", "`--fleet-breaker --replicas 2`, no store", CAPPED + ["--fleet-breaker", "--replicas", "2"]),
    ("capped", "`--fleet-breaker --replicas 2 --pace-store`",
     CAPPED + ["--fleet-breaker", "--replicas", "2", "--pace-store"]),
    ("capped", "`--breaker --fleet`: with fleet-paced gates", CAPPED + ["--breaker", "--fleet", "--replicas", "1"]),
    ("capped", "`--fleet-breaker --fleet`", CAPPED + ["--fleet-breaker", "--fleet", "--replicas", "1"]),
    ("whole", "`--breaker`: each process alone", WHOLE + ["--breaker", "--replicas", "1"]),
    ("whole", "`--fleet-breaker`", WHOLE + ["--fleet-breaker", "--replicas", "1"]),
]


def seeds(text):
    low, high = text.split("-")
    return range(int(low), int(high) + 1)


def run(binary, args, seed):
    out = subprocess.run([binary, "simulate", *args, "--seed", str(seed), "--json"],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    return result[0] if isinstance(result, list) else result


def spread(values, digits, scale=1.0, suffix=""):
    """Mean ± one standard deviation of `values` (those that are not None),
    times `scale`, to `digits` places, then `suffix`; "-" if there are none."""
    values = [v * scale for v in values if v is not None]
    if not values:
        return "-"
    mean = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:,.{digits}f} ± {sd:,.{digits}f}{suffix}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="2001-2020")
    parser.add_argument("--binary", default="target/release/stormguard")
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()
    print("| world | set-up | trials per openTimeout | breakers closed after the outage | served |")
    print("| --- | --- | ---: | ---: | ---: |")
    with ThreadPoolExecutor(options.jobs) as pool:
        for world, name, args in ROWS:
            results = list(pool.map(lambda seed: run(options.binary, args, seed), seeds(options.seeds)))
            trials = [r["half_open_trials_per_window"] for r in results]
            closed = [r["breakers_closed_seconds"] for r in results if r["breakers_closed_seconds"] is not None]
            never = len(results) - len(closed)
            closed_text = spread(closed, 2) + " s" + (f" ({never} never)" if never else "")
            served = [r["succeeded"] for r in results]
            print(f"| {world} | {name} | {spread(trials, 0)} | {closed_text} | {spread(served, 0)} |", flush=True)


if __name__ == "__main__":
    main()
