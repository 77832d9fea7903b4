#!/usr/bin/env python3
"""A real dependency that comes back from an outage with less capacity than
its callers want: what the fleet's send gate serves of it, how soon, to
which class of call first, and how fast it fails the calls it cannot serve.

It starts, on loopback, HAProxy (Debian's package) in front of Python's
stock http.server, down (HAProxy answers 503) for `--outage` seconds from
the start and then limiting to `--capacity` requests a second with its
usual stick-table limiter, which counts the requests it refuses too: while
more arrive than it takes, it refuses them all. 30 client processes
(`--processes`), dealt in turn to the Rust, Go and Python clients' herd
examples, send calls arriving at random (Poisson, each process `--rate` /
`--processes` a second) for `--seconds`, through one daemon, under
bench/real-fleet.yaml's `overload-gated`: the gate with its defaults, each
call tried at most 4 times. Ways:

- (a) every call of the default class, at `--rate` (160 a second: over
  five times what the dependency takes);
- (b) a third of the calls critical and a third sheddable, at `--low-rate`
  (60 a second: the critical ones, 20 a second, stay below the capacity);
- (c) a sixth critical and a third sheddable, at `--rate` (critical 27 a
  second: just below the capacity, with the rest far above it).

Each process prints every call it made (`--records`: arrival, class,
outcome, seconds to succeed or to fail, attempts sent). For each way and run it prints, from those
records: the calls served from the end of the outage until calls stop
arriving, as a share of what HAProxy could take then (capacity x (seconds -
outage)), and HAProxy's own 2xx answers over that span (its stats page, read
every 100 ms); the p99 time to success of calls that arrived a second or
more after the outage; per class, the share served of those calls and
their p99; and the p99 and the longest time to fail of the fail-fast
answers: calls that gave up shed, or refused by their breaker, having sent
nothing. Beside them, the simulator's means over seeds 2001-2020 for the
same world, with their spread (one standard deviation over the seeds)
(`simulate --scenario errors --dependency request-rate`).

Targets (the real runs): served at least 90 % of the capacity, in every
way; in (a), the p99 after the first second back at most 1 s (in (b) and
(c) critical calls may wait up to their class's gate.maxWait, 5 s, by
design, so their p99 is shown without a target); in (b), at least 99 % of
the critical calls served; in (b) and (c), sheddable calls served less
than default ones, and default ones less than critical ones; the fail-fast
p99 at most 10 ms in every way. Exit 1 when one is not met.

Usage: bench/real_overload.py [--processes N] [--rate R] [--low-rate R]
       [--seconds S] [--outage S] [--capacity C] [--runs N]
       [--languages L,L,...] [--no-build] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from dependencies import Haproxy
from real_breakers import Counter
from real_fleet import BINARY, HERDS, POLICY, ROOT, SEEDS, Fleet, build, last_lines, percentile

SERVICE = "overload-gated"
CLASSES = ("critical", "default", "sheddable")
# Calls that arrive this long after the outage meet the dependency back.
SETTLED = 1.0
# The fail-fast answers: calls that gave up so, having sent nothing.
FAIL_FAST = ("shed", "circuit-open")
# Targets.
SERVED_SHARE, P99_AFTER, CRITICAL_SERVED, FAIL_FAST_P99 = 0.90, 1.0, 0.99, 0.010


def ways(opts):
    """(label, rate, critical share, sheddable share) of each way."""
    return [
        ("(a)", f"every call default, {opts.rate:g}/s", opts.rate, 0.0, 0.0),
        ("(b)", f"1/3 critical, 1/3 sheddable, {opts.low_rate:g}/s", opts.low_rate, 0.3333, 0.3333),
        ("(c)", f"1/6 critical, 1/3 sheddable, {opts.rate:g}/s", opts.rate, 0.1667, 0.3333),
    ]


def accepted_between(samples, start, end):
    """HAProxy's 2xx answers from `start` to `end`, from its samples."""
    before = [accepted for t, _, accepted in samples if t <= start]
    inside = [accepted for t, _, accepted in samples if t <= end]
    if not inside:
        return 0
    return inside[-1] - (before[-1] if before else samples[0][2])


def summary(records, opts):
    """What one run's call records say: each record (language, arrival,
    class, outcome, seconds, attempts)."""
    back = opts.outage + SETTLED
    served = sum(1 for _, arrival, _, outcome, took, _ in records
                 if outcome == "ok" and opts.outage <= arrival + took < opts.seconds)
    after = [r for r in records if r[1] >= back]
    fast = [r for r in records if r[3] in FAIL_FAST and r[5] == 0]
    classes = {}
    for name in CLASSES:
        calls = [r for r in after if r[2] == name]
        if calls:
            times = [r[4] for r in calls if r[3] == "ok"]
            classes[name] = {"calls": len(calls), "served_share": len(times) / len(calls),
                             "p99_seconds": percentile(times, 0.99) if times else None}
    outcomes = {}
    for r in records:
        outcomes[r[3]] = outcomes.get(r[3], 0) + 1
    by_language = {}
    for language in sorted({r[0] for r in fast}):
        times = [r[4] for r in fast if r[0] == language]
        by_language[language] = percentile(times, 0.99)
    return {
        "calls": len(records),
        "outcomes": outcomes,
        "served_after_outage": served,
        "served_share_of_capacity": served / (opts.capacity * (opts.seconds - opts.outage)),
        "p99_after_recovery_seconds": percentile([r[4] for r in after if r[3] == "ok"], 0.99),
        "classes": classes,
        "fail_fast": len(fast),
        "fail_fast_p99_seconds": percentile([r[4] for r in fast], 0.99) if fast else None,
        "fail_fast_max_seconds": max((r[4] for r in fast), default=None),
        "fail_fast_p99_by_language": by_language,
    }


def run(opts, rate, critical, sheddable):
    fleet = Fleet()
    start_at = int(time.time() * 1000) + 5000
    start = start_at / 1000
    daemon_url = fleet.start(start_at)
    haproxy = Haproxy(opts.capacity, start + opts.outage)
    counter = Counter(haproxy)
    python_path = os.path.join(ROOT, "clients", "python")
    environment = {**os.environ, "PYTHONPATH": python_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    classes = ["--records", "--critical", str(critical), "--sheddable", str(sheddable)]
    languages = [opts.languages[i % len(opts.languages)] for i in range(opts.processes)]
    herd = []
    try:
        herd = [
            subprocess.Popen(
                [*HERDS[language], "--daemon", daemon_url, "--service", SERVICE, "--instance", f"pod-{i}",
                 "--dependency", haproxy.address, "--start-at", str(start_at), "--rate", str(rate / opts.processes),
                 "--seconds", str(opts.seconds), "--seed", str(i + 1), *classes],
                stdout=subprocess.PIPE, text=True, env=environment)
            for i, language in enumerate(languages)
        ]
        results = last_lines(herd, opts.seconds + 300)
    finally:
        samples = counter.stop()
        for process in herd:
            process.kill()
            process.wait()
        haproxy.stop()
        fleet.stop()
    records = [(language, arrival, "default" if named == "-" else named, outcome, took, attempts)
               for language, result in zip(languages, results)
               for arrival, named, outcome, took, attempts in result["calls"]]
    got = summary(records, opts)
    got["haproxy_2xx_after_outage"] = accepted_between(samples, start + opts.outage, start + opts.seconds)
    return got


def simulated(opts, rate, critical, sheddable):
    """Means and spreads over SEEDS of the simulator's run of the same world."""
    runs = []
    for seed in SEEDS:
        classes = ["--critical", str(critical), "--sheddable", str(sheddable)] if critical or sheddable else []
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", SERVICE,
             "--scenario", "errors", "--error-rate", "0", "--rate", str(rate), "--processes", str(opts.processes),
             "--outage", f"{opts.outage:g}s", "--capacity", str(opts.capacity), "--dependency", "request-rate",
             "--until", f"{opts.seconds:g}s", "--latency", "1ms", "--replicas", "1", *classes],
            check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(text))

    def spread(values):
        """(mean, one standard deviation) of the values that are there, or None."""
        values = [v for v in values if v is not None]
        if not values:
            return None
        return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    classes = {}
    for name in CLASSES:
        of = [next((c for c in r["classes"] or [] if c["class"] == name), None) for r in runs]
        if any(c is not None and c["calls"] for c in of):
            classes[name] = {
                "served_share": spread(c["served_share_after_recovery"] for c in of if c is not None),
                "p99_seconds": spread(c["p99_after_recovery_seconds"] for c in of if c is not None),
            }
    if not classes:
        # No class named: every call is of the default class, and the
        # simulator reports no class's share.
        classes["default"] = {"served_share": None,
                              "p99_seconds": spread(r["p99_after_recovery_seconds"] for r in runs)}
    return {
        "served_after_outage": spread(r["served_after_outage"] for r in runs),
        "p99_after_recovery_seconds": spread(r["p99_after_recovery_seconds"] for r in runs),
        "fail_fast_p99_seconds": spread(r["fail_fast_p99_seconds"] for r in runs),
        "classes": classes,
    }


def mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def fmt(value, form, unit="", scale=1.0):
    return "-" if value is None else f"{value * scale:{form}}{unit}"


def fmt_spread(pair, form, unit="", scale=1.0):
    if pair is None:
        return "-"
    return f"{pair[0] * scale:{form}} ± {pair[1] * scale:{form}}{unit}"


def show(label, what, runs, sim, opts):
    """One way's block of the table: the real runs' means, the simulator's."""
    capacity = opts.capacity * (opts.seconds - opts.outage)
    served = mean(r["served_after_outage"] for r in runs)
    haproxy = mean(r["haproxy_2xx_after_outage"] for r in runs)
    sim_served = sim["served_after_outage"]
    print(f"{label} {what}")
    print(f"  {'':32} {'real':>24}   {'simulated (mean ± sd)':>26}")
    print(f"  {'served after the outage':32} {f'{served:,.0f} ({served / capacity:.1%})':>24}   "
          f"{fmt_spread(sim_served, ',.0f') + f' ({sim_served[0] / capacity:.1%})':>26}")
    print(f"  {'  HAProxy 2xx then':32} {f'{haproxy:,.0f} ({haproxy / capacity:.1%})':>24}")
    print(f"  {f'p99 to success, from {opts.outage + SETTLED:g} s':32} "
          f"{fmt(mean(r['p99_after_recovery_seconds'] for r in runs), '.3f', ' s'):>24}   "
          f"{fmt_spread(sim['p99_after_recovery_seconds'], '.3f', ' s'):>26}")
    for name in CLASSES:
        real = [r["classes"][name] for r in runs if name in r["classes"]]
        if not real:
            continue
        share = mean(c["served_share"] for c in real)
        p99 = mean(c["p99_seconds"] for c in real)
        s = sim["classes"].get(name, {"served_share": None, "p99_seconds": None})
        real_text = f"{share:.1%}, {fmt(p99, '.2f', ' s')}"
        sim_text = f"{fmt_spread(s['served_share'], '.1f', ' %', 100)}, {fmt_spread(s['p99_seconds'], '.2f', ' s')}"
        print(f"  {'  ' + name + ': served, p99':32} {real_text:>24}   {sim_text:>26}")
    worst = max((r["fail_fast_p99_seconds"] for r in runs if r["fail_fast_p99_seconds"] is not None), default=None)
    longest = max((r["fail_fast_max_seconds"] for r in runs if r["fail_fast_max_seconds"] is not None), default=None)
    fast = sum(r["fail_fast"] for r in runs) / len(runs)
    real_text = f"{fmt(worst, '.1f', '', 1e3)} / {fmt(longest, '.1f', ' ms', 1e3)}"
    print(f"  {f'fail-fast ({fast:,.0f}): p99 / max':32} {real_text:>24}   "
          f"{fmt_spread(sim['fail_fast_p99_seconds'], '.1f', ' ms', 1e3):>26}")
    by_language = {}
    for r in runs:
        for language, p99 in r["fail_fast_p99_by_language"].items():
            by_language[language] = max(by_language.get(language, 0.0), p99)
    if by_language:
        print("    fail-fast p99 by client: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in by_language.items()))
    outcomes = {}
    for r in runs:
        for outcome, n in r["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n / len(runs)
    print(f"  {'calls':32} {sum(outcomes.values()):,.0f}: "
          + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1])))
    print()


def targets(label, runs):
    """(what, value shown, met) of each target on one way's real runs."""
    got = []
    share = mean(r["served_share_of_capacity"] for r in runs)
    got.append((f"{label} served ≥ {SERVED_SHARE:.0%} of capacity", f"{share:.1%}", share >= SERVED_SHARE))
    if label == "(a)":
        p99 = max(r["p99_after_recovery_seconds"] for r in runs)
        got.append((f"{label} p99 after the first second back ≤ {P99_AFTER:g} s", f"{p99:.3f} s", p99 <= P99_AFTER))
    classes = lambda key: {name: mean(r["classes"].get(name, {}).get(key) for r in runs) for name in CLASSES}
    shares = classes("served_share")
    if label == "(b)":
        critical = shares["critical"]
        got.append((f"{label} critical served ≥ {CRITICAL_SERVED:.0%}", fmt(critical, ".1%"),
                    critical is not None and critical >= CRITICAL_SERVED))
    if label in ("(b)", "(c)"):
        # A class with no call after the outage has no share: not met.
        ordered = None not in shares.values() and shares["sheddable"] < shares["default"] < shares["critical"]
        got.append((f"{label} served: sheddable < default < critical",
                    " < ".join(fmt(shares[n], ".1%") for n in reversed(CLASSES)), ordered))
    fast = [r["fail_fast_p99_seconds"] for r in runs if r["fail_fast_p99_seconds"] is not None]
    if fast:
        worst = max(fast)
        got.append((f"{label} fail-fast p99 ≤ {FAIL_FAST_P99 * 1e3:g} ms", f"{worst * 1e3:.1f} ms",
                    worst <= FAIL_FAST_P99))
    return got


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=30)
    parser.add_argument("--rate", type=float, default=160.0, help="calls a second, in all, in (a) and (c)")
    parser.add_argument("--low-rate", type=float, default=60.0,
                        help="calls a second, in all, in (b): its critical third below the capacity")
    parser.add_argument("--seconds", type=float, default=90.0, help="seconds the calls arrive for")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the dependency is down from the start")
    parser.add_argument("--capacity", type=int, default=30, help="requests a second HAProxy takes once back")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--languages", default="rust,go,python")
    parser.add_argument("--no-build", action="store_true",
                        help="run the binaries under target/ as they are (the Go herd included)")
    parser.add_argument("--json")
    opts = parser.parse_args()
    opts.languages = opts.languages.split(",")
    if not opts.no_build:
        build(opts.languages)
    print(f"{opts.processes} processes ({', '.join(opts.languages)} in turn), calls arriving for "
          f"{opts.seconds:g} s through one daemon under {SERVICE}; HAProxy down {opts.outage:g} s, then "
          f"taking {opts.capacity} requests a second ({opts.capacity * (opts.seconds - opts.outage):,.0f} "
          f"until arrivals end); mean of {opts.runs} run(s), simulator over seeds "
          f"{SEEDS[0]}-{SEEDS[-1]}")
    print()
    report, results = {}, []
    for label, what, rate, critical, sheddable in ways(opts):
        runs = [run(opts, rate, critical, sheddable) for _ in range(opts.runs)]
        sim = simulated(opts, rate, critical, sheddable)
        report[label] = {"way": what, "rate": rate, "critical": critical, "sheddable": sheddable,
                         "real": runs, "simulated": sim}
        show(label, what, runs, sim, opts)
        results += targets(label, runs)
    print("targets (the real runs):")
    for what, value, ok in results:
        print(f"  {what:48} {value:>24}  {'met' if ok else 'NOT MET'}")
    met = all(ok for _, _, ok in results)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
