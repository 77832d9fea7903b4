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

# Runs from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from stormguard_client import Dependency, PolicyWatch, Reporter  # noqa: E402
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
    args = parser.parse_args()
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
    seconds, lock = [], threading.Lock()

    def caller(arrival):
        go.wait()
        try:
            status = calls.call("/call", attempt)
        except Exception:  # noqa: BLE001 - every way a call fails is a call that gave up
            return
        if 200 <= status < 300:
            took = max(time.time() - (start + arrival), 0.0)
            with lock:
                seconds.append(took)

    if args.rate is None:
        # Started before the start and released together, so that thread
        # start-up does not spread the herd's first tries.
        callers = [threading.Thread(target=caller, args=(0.0,), name=f"caller-{i}")
                   for i in range(args.callers)]
        for thread in callers:
            thread.start()
        time.sleep(max(start - time.time(), 0.0))
        go.set()
    else:
        # Each call on a thread of its own, started at its arrival.
        go.set()
        callers = []
        for i, arrival in enumerate(poisson(args.rate, args.seconds, args.seed)):
            time.sleep(max(start + arrival - time.time(), 0.0))
            thread = threading.Thread(target=caller, args=(arrival,), name=f"caller-{i}")
            thread.start()
            callers.append(thread)
    for thread in callers:
        thread.join()
    reporter.stop()
    watch.stop()
    print(json.dumps({
        "instance": args.instance,
        "succeeded": len(seconds),
        "gave_up": len(callers) - len(seconds),
        "attempts": attempt.sent,
        "seconds": seconds,
    }), flush=True)


if __name__ == "__main__":
    main()
