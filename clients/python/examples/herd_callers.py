"""One process of a herd, for the fleet recovery benchmark
(``bench/real_fleet.py``): ``--callers`` callers each want one call to
``--dependency`` served, all starting at ``--start-at``, through
stormguard_client under the policy the daemon serves for ``--service``.

    PYTHONPATH=clients/python python3 clients/python/examples/herd_callers.py \\
        --daemon http://127.0.0.1:8080 --service dependency --instance pod-1 \\
        --dependency http://127.0.0.1:9000 --callers 50 --start-at "$(date +%s%3N)"

``--no-fleet-pacing`` keeps each send gate to what this process learns
alone. Once every caller is done it prints one JSON line: the calls that
succeeded and gave up, the attempts sent, and each success's time from its
call's arrival (the start, unless ``--rate`` is given) in seconds.

With ``--rate R --seconds S`` the calls arrive instead, one at a time from
``--start-at``, at random (a Poisson process seeded by ``--seed``) at R a
second for S seconds: the open-loop callers of ``stormguard simulate
--scenario errors`` (``bench/fleet_budget.py``, ``bench/real_fleet.py --errors``).
``--report-every`` sets the reporter's interval (2 s unless given).

``--critical SHARE --sheddable SHARE`` make those shares of the calls, drawn
call by call from ``--seed``, of those classes (the rest name none). The
JSON line then (or with ``--records``) also holds every call: ``[arrival, class, outcome, seconds,
attempts]``, the arrival in seconds from the start, the class
(``critical``, ``sheddable``, or ``-`` for none), the outcome ``ok`` or why
it gave up in the Rust example's words (``shed``, ``no-turn``,
``circuit-open``, ``exhausted``, ``deadline``, ``budget``,
``not-retryable``), the seconds it took to succeed or to fail, and the
attempts a failed call sent. This client raises Shed, NoTurn and
CallNotPermitted for the first three, and otherwise hands back the last
attempt's status or exception: why it stopped there is read from the
policy (see :func:`why_it_stopped`).
"""

import argparse
import http.client
import json
import math
import pathlib
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

# Runs from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from stormguard_client import CallNotPermitted, Dependency, NoTurn, PolicyWatch, Reporter, Shed  # noqa: E402
from stormguard_client import settings  # noqa: E402
from stormguard_client.dependency import failure_of  # noqa: E402


class Attempts:
    """Attempts at the dependency, each one a GET of ``url``, counted
    across the process's callers."""

    def __init__(self, url):
        self.url = url
        self.sent = 0
        self._lock = threading.Lock()

    def __call__(self, timeout):
        """One attempt: its HTTP status, for the policy's ``retryOn`` to judge
        (a 2xx is a success). A failure without an answer is a timeout if it
        took too long, else a connection failure, whatever broke (the Rust
        example's judgement)."""
        with self._lock:
            self.sent += 1
        try:
            with urllib.request.urlopen(self.url, timeout=timeout) as answer:
                answer.read()
                return answer.status
        except urllib.error.HTTPError as error:
            with error:
                return error.code
        except (OSError, http.client.HTTPException) as error:
            if failure_of(error) == "timeout":
                raise TimeoutError(f"{self.url}: no answer in time") from error
            raise ConnectionRefusedError(f"{self.url}: {error}") from error


def arguments():
    """The command line's flags, as the Rust example takes them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True, help="the stormguard daemon's base URL")
    parser.add_argument("--service", required=True, help="the service whose policy the calls follow")
    parser.add_argument("--instance", required=True, help="this process, as reports and pace asks name it")
    parser.add_argument("--dependency", required=True, help="the dependency's base URL; calls GET /call")
    parser.add_argument("--callers", type=int, default=50, help="callers, one call each (50)")
    parser.add_argument("--start-at", type=int, required=True, help="when the callers start, in Unix ms")
    parser.add_argument("--no-fleet-pacing", action="store_true",
                        help="each send gate paces by what this process alone learns")
    parser.add_argument("--rate", type=float,
                        help="calls arrive at random at this many a second instead (needs --seconds); "
                             "--callers is then ignored")
    parser.add_argument("--seconds", type=float, help="with --rate, how long the calls arrive for")
    parser.add_argument("--seed", type=int, default=1, help="with --rate, the arrivals' random seed (1)")
    parser.add_argument("--report-every", type=float, default=2.0,
                        help="the reporter's interval, in seconds (2)")
    parser.add_argument("--records", action="store_true", help="print every call, whatever the shares")
    parser.add_argument("--critical", type=float, default=0.0,
                        help="the share of calls that are critical, drawn call by call (0)")
    parser.add_argument("--sheddable", type=float, default=0.0,
                        help="the share of calls that are sheddable, drawn call by call (0)")
    args = parser.parse_args()
    for name in ("critical", "sheddable"):
        if not 0 <= getattr(args, name) <= 1:
            parser.error(f"--{name} takes a share in [0, 1], not {getattr(args, name)}")
    if args.rate is not None:
        if args.seconds is None:
            parser.error("--seconds is required with --rate")
        if not args.rate > 0:
            parser.error(f"--rate must be above 0 calls a second, not {args.rate}")
    if not args.report_every > 0:
        parser.error(f"--report-every must be above 0 seconds, not {args.report_every}")
    return args


def poisson(rate: float, seconds: float, seed: int) -> list[float]:
    """Arrival times, in seconds from the start, of a Poisson process of
    ``rate`` a second over ``seconds``."""
    rng = random.Random(seed)
    at = 0.0
    arrivals: list[float] = []
    while True:
        at += -math.log(1.0 - rng.random()) / rate
        if at >= seconds:
            return arrivals
        arrivals.append(at)


def classes(calls: int, critical: float, sheddable: float, seed: int) -> list[str | None]:
    """The class of each of ``calls`` calls: ``critical`` and ``sheddable``
    shares of them, drawn call by call from ``seed``; None names none."""
    rng = random.Random(seed ^ 0x5EED)
    drawn: list[str | None] = []
    for _ in range(calls):
        draw = rng.random()
        drawn.append("critical" if draw < critical else "sheddable" if draw < critical + sheddable else None)
    return drawn


def why_it_stopped(policy: Mapping[str, object], status: int | None, error: Exception | None, sent: int,
                   took: float) -> str:
    """Why a call that handed back its last attempt's ``status`` (not a
    2xx) or ``error``, after sending ``sent`` attempts over ``took``
    seconds, stopped there, as the Rust client names it: the policy's
    ``retryOn`` does not retry that failure; or every retry was made; or,
    with retries left, the retry budget refused one, if the budget is on
    and the deadline (``maxElapsed``) was too far off for any backoff to
    reach it; else the deadline."""
    retry_on = settings.retry_on(policy)
    if status is not None:
        retryable = retry_on.retries_status(status)
    else:
        failed = failure_of(error) if error is not None else None
        retryable = failed is not None and retry_on.retries_failure(failed)
    if not retryable:
        return "not-retryable"
    if sent > settings.max_retries(policy):
        return "exhausted"
    deadline = settings.max_elapsed(policy)
    budgeted = settings.block(policy, "budget")["enabled"] is True
    if budgeted and (deadline is None or took * 1e9 + settings.backoff(policy).max_nanos < deadline):
        return "budget"
    return "deadline"


def main():
    args = arguments()
    start = args.start_at / 1000
    watch = PolicyWatch(args.daemon, [args.service])
    watch.start()
    reporter = Reporter(args.daemon, args.instance, interval=args.report_every,
                        fleet_pacing=not args.no_fleet_pacing).start()
    calls = Dependency(watch, args.service, reporter)
    attempt = Attempts(f"{args.dependency.rstrip('/')}/call")
    go = threading.Event()
    seconds, every, lock = [], [], threading.Lock()
    classed = args.critical > 0 or args.sheddable > 0 or args.records

    def caller(arrival, criticality=None):
        go.wait()
        sent = 0

        def counted(timeout: float | None) -> int:
            nonlocal sent
            sent += 1
            return attempt(timeout)

        status, error = None, None
        try:
            status = calls.call("/call", counted, criticality=criticality)
        except Shed:
            outcome = "shed"
        except NoTurn:
            outcome = "no-turn"
        except CallNotPermitted:
            outcome = "circuit-open"
        except Exception as failure:  # noqa: BLE001 - the last attempt's failure: the call gave up
            error = failure
        took = max(time.time() - (start + arrival), 0.0)
        if error is not None or (status is not None and not 200 <= status < 300):
            outcome = why_it_stopped(watch.policy(args.service), status, error, sent, took)
        elif status is not None:
            outcome = "ok"
        with lock:
            if outcome == "ok":
                seconds.append(took)
                sent = 0
            if classed:
                every.append([arrival, criticality or "-", outcome, took, sent])

    if args.rate is None:
        # Started before the start and released together, so that thread
        # start-up does not spread the herd's first tries.
        drawn = classes(args.callers, args.critical, args.sheddable, args.seed)
        callers = [threading.Thread(target=caller, args=(0.0, criticality), name=f"caller-{i}")
                   for i, criticality in enumerate(drawn)]
        for thread in callers:
            thread.start()
        time.sleep(max(start - time.time(), 0.0))
        go.set()
    else:
        # Each call on a thread of its own, started at its arrival.
        go.set()
        callers = []
        arrivals = poisson(args.rate, args.seconds, args.seed)
        drawn = classes(len(arrivals), args.critical, args.sheddable, args.seed)
        for i, (arrival, criticality) in enumerate(zip(arrivals, drawn)):
            time.sleep(max(start + arrival - time.time(), 0.0))
            thread = threading.Thread(target=caller, args=(arrival, criticality), name=f"caller-{i}")
            thread.start()
            callers.append(thread)
    for thread in callers:
        thread.join()
    reporter.stop()
    watch.stop()
    line = {
        "instance": args.instance,
        "succeeded": len(seconds),
        "gave_up": len(callers) - len(seconds),
        "attempts": attempt.sent,
        "seconds": seconds,
    }
    if classed:
        line["calls"] = every
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
