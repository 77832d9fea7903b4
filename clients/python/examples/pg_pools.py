"""One process's PostgreSQL connection pool, reconnecting through
stormguard_client when the database restarts: ``--connections`` slots, all
starting at ``--start-at``, each connects to ``--dsn`` as one call to the
dependency ``--service`` (endpoint ``connect``), under the policy the daemon
serves for it, then holds its connection until ``--until``.

    PYTHONPATH=clients/python python3 clients/python/examples/pg_pools.py \\
        --daemon http://127.0.0.1:8080 --service herd-jittered --instance pod-1 \\
        --dsn "host=127.0.0.1 port=5432 user=postgres dbname=postgres" --connections 5 \\
        --start-at "$(date +%s%3N)" --until "$(( $(date +%s%3N) + 15000 ))"

One attempt is one ``psycopg.AsyncConnection.connect`` (``connect_timeout``
2 s). A slot that is connected runs ``SELECT 1`` every 100 ms; when that
fails (the server went away) it closes the connection and connects again
through the client. A call the client gives up on is counted, and the slot
tries a new call a second later. At ``--until`` every slot stops and closes
its connection.

A refused attempt is, to the client, what the Rust example makes of it:
too many clients (SQLSTATE 53300) and a database starting up or shutting
down (57P03) are a 503, another SQLSTATE a 500, and no answer from the
server (refused, reset, closed, timed out) a connection failure.

``--no-fleet-pacing`` keeps each send gate to what this process learns
alone; ``--seed`` seeds the client's random draws (the backoff's jitter;
unseeded unless given); ``--report-every`` sets the reporter's interval
(2 s unless given). At ``--until`` it prints one JSON line: the attempts,
the refusals by kind, each time (Unix ms) all the slots were connected,
and the calls that gave up.
"""

import argparse
import asyncio
import json
import pathlib
import random
import re
import sys
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

# Runs from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from stormguard_client import Reporter  # noqa: E402
from stormguard_client.aio import AsyncDependency, AsyncPolicyWatch  # noqa: E402
from stormguard_client.dependency import failure_of  # noqa: E402

CONNECT_TIMEOUT = 2
"""libpq's ``connect_timeout`` for one attempt, in seconds."""
PROBE_EVERY = 0.1
"""Seconds between a connected slot's ``SELECT 1``."""
AFTER_GIVING_UP = 1.0
"""Seconds a slot whose call gave up waits before a new call."""

TOO_MANY_CLIENTS, STARTING_UP, UNREACHABLE, OTHER = "too_many_clients", "starting_up", "unreachable", "other"
KINDS = (TOO_MANY_CLIENTS, STARTING_UP, UNREACHABLE, OTHER)
"""The kinds of refusal counted, as the JSON line names them."""
STATUS = {TOO_MANY_CLIENTS: 503, STARTING_UP: 503, OTHER: 500}
"""The HTTP status a refusal the server answered stands for."""
KIND_OF_SQLSTATE = {"53300": TOO_MANY_CLIENTS, "57P03": STARTING_UP}

# libpq keeps a failed connection's SQLSTATE to itself (psycopg's error has
# none): the server's message, after its severity, tells them apart. These
# are PostgreSQL's (English) messages for 53300 (too_many_connections) and
# 57P03 (cannot_connect_now); any other message from the server is another
# SQLSTATE.
SERVER_SAID = re.compile(r"\b(?:FATAL|PANIC|ERROR):\s+(.*)")
KIND_OF_MESSAGE = (
    ("sorry, too many clients already", TOO_MANY_CLIENTS),
    ("remaining connection slots are reserved", TOO_MANY_CLIENTS),
    ("too many connections for", TOO_MANY_CLIENTS),
    ("the database system is starting up", STARTING_UP),
    ("the database system is shutting down", STARTING_UP),
    ("the database system is in recovery mode", STARTING_UP),
    ("the database system is not yet accepting connections", STARTING_UP),
    ("the database system is not accepting connections", STARTING_UP),
)


def refusal_of(error: psycopg.Error) -> str:
    """The kind of refusal a failed connect stands for: by its SQLSTATE, or
    its server's message when psycopg has no SQLSTATE; ``unreachable`` when
    no server answered."""
    if error.sqlstate:
        return KIND_OF_SQLSTATE.get(error.sqlstate, OTHER)
    said = SERVER_SAID.search(str(error))
    if said is None:
        return UNREACHABLE
    message = said.group(1).strip()
    for start, kind in KIND_OF_MESSAGE:
        if message.startswith(start):
            return kind
    return OTHER


def judged(error: Exception) -> str | None:
    """The retryOn failure an attempt's exception stands for: a connect
    that ran past the call's per-try timeout (cancelled, so a TimeoutError)
    is a connection failure, as one past ``connect_timeout`` is."""
    if isinstance(error, TimeoutError):
        return "connect-failure"
    return failure_of(error)


def now_ms() -> int:
    """The time, in Unix ms."""
    return time.time_ns() // 1_000_000


class Slot:
    """One connection of the pool: the one it holds, if any, and whether
    the pool counts it as connected."""

    def __init__(self) -> None:
        self.connection: psycopg.AsyncConnection[TupleRow] | None = None
        self.counted = False


class Pool:
    """The pool's slots, their connects through ``calls``, and what they
    came to."""

    def __init__(self, dsn: str, connections: int, calls: AsyncDependency) -> None:
        self.dsn = dsn
        self.connections = connections
        self.calls = calls
        self.attempts = 0
        self.refused = dict.fromkeys(KINDS, 0)
        self.full_at: list[int] = []
        self.gave_up = 0
        self.connected = 0
        self.stopping = False
        """Set before the slots are cancelled at the end: an attempt
        cancelled then was not refused."""

    async def run_slot(self, go: asyncio.Event) -> None:
        """One slot, from ``go`` until it is cancelled: connect, hold the
        connection while it answers, again."""
        slot = Slot()
        await go.wait()
        try:
            while True:
                if not await self.connect(slot):
                    self.gave_up += 1
                    await asyncio.sleep(AFTER_GIVING_UP)
                    continue
                self.joined(slot)
                assert slot.connection is not None
                await self.hold(slot.connection)
                await self.drop(slot)
        finally:
            await self.drop(slot)

    async def connect(self, slot: Slot) -> bool:
        """One call: connects ``slot``, each attempt through the client.
        Whether it connected (else the call gave up)."""
        async def attempt(timeout: float | None) -> int:
            self.attempts += 1
            try:
                slot.connection = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
            except psycopg.Error as error:
                kind = refusal_of(error)
                self.refused[kind] += 1
                if kind == UNREACHABLE:
                    raise ConnectionRefusedError(f"connect: {error}") from error
                return STATUS[kind]
            except asyncio.CancelledError:
                if not self.stopping:
                    self.refused[UNREACHABLE] += 1  # past the call's per-try timeout
                raise
            return 200

        try:
            status = await self.calls.call("connect", attempt, failure=judged)
        except Exception:  # noqa: BLE001 - every way a call fails is a call that gave up
            return False
        return 200 <= status < 300 and slot.connection is not None

    def joined(self, slot: Slot) -> None:
        """Counts ``slot`` connected; notes when the pool is full again."""
        slot.counted = True
        self.connected += 1
        if self.connected == self.connections:
            self.full_at.append(now_ms())

    @staticmethod
    async def hold(connection: "psycopg.AsyncConnection[TupleRow]") -> None:
        """Runs ``SELECT 1`` on ``connection`` every PROBE_EVERY; returns
        once one fails."""
        while True:
            await asyncio.sleep(PROBE_EVERY)
            try:
                await connection.execute("SELECT 1")
            except (psycopg.Error, OSError):
                return

    async def drop(self, slot: Slot) -> None:
        """Closes ``slot``'s connection, if any, and counts it gone."""
        if slot.counted:
            slot.counted = False
            self.connected -= 1
        connection, slot.connection = slot.connection, None
        if connection is not None:
            await connection.close()


def arguments() -> argparse.Namespace:
    """The command line's flags, as the Rust example takes them."""
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True, help="the stormguard daemon's base URL")
    parser.add_argument("--service", required=True, help="the service whose policy the connects follow")
    parser.add_argument("--instance", required=True, help="this process, as reports and pace asks name it")
    parser.add_argument("--dsn", required=True, help="the database, as a libpq connection string")
    parser.add_argument("--connections", type=int, required=True, help="the pool's connections")
    parser.add_argument("--start-at", type=int, required=True, help="when the slots start, in Unix ms")
    parser.add_argument("--until", type=int, required=True, help="when the slots stop, in Unix ms")
    parser.add_argument("--no-fleet-pacing", action="store_true",
                        help="each send gate paces by what this process alone learns")
    parser.add_argument("--seed", type=int, help="the client's random seed (the backoff's jitter; unseeded)")
    parser.add_argument("--report-every", type=float, default=2.0,
                        help="the reporter's interval, in seconds (2)")
    args = parser.parse_args()
    if args.connections < 1:
        parser.error(f"--connections must be at least 1, not {args.connections}")
    if args.until <= args.start_at:
        parser.error(f"--until ({args.until}) must come after --start-at ({args.start_at})")
    if not args.report_every > 0:
        parser.error(f"--report-every must be above 0 seconds, not {args.report_every}")
    try:
        conninfo_to_dict(args.dsn)
    except psycopg.ProgrammingError as error:
        parser.error(f"--dsn: {error}")
    return args


async def run(args: argparse.Namespace) -> Pool:
    """The pool, from ``--start-at`` to ``--until``: what it came to."""
    start, until = args.start_at / 1000, args.until / 1000
    async with AsyncPolicyWatch(args.daemon, [args.service]) as watch:
        reporter = Reporter(args.daemon, args.instance, interval=args.report_every,
                            fleet_pacing=not args.no_fleet_pacing).start()
        rng = None if args.seed is None else random.Random(args.seed)
        calls = AsyncDependency(watch, args.service, reporter, rng=rng)
        pool = Pool(args.dsn, args.connections, calls)
        # Started before the start and released together, so that task
        # start-up does not spread the first connects.
        go = asyncio.Event()
        slots = [asyncio.create_task(pool.run_slot(go), name=f"slot-{i}") for i in range(args.connections)]
        await asyncio.sleep(max(start - time.time(), 0.0))
        go.set()
        # Slots run until cancelled: one that ends sooner failed, and ends the run.
        await asyncio.wait(slots, timeout=max(until - time.time(), 0.0), return_when=asyncio.FIRST_EXCEPTION)
        pool.stopping = True
        for task in slots:
            task.cancel()
        ended = await asyncio.gather(*slots, return_exceptions=True)
        await asyncio.to_thread(reporter.stop)
    for result in ended:
        if isinstance(result, Exception):
            raise result
    return pool


def main() -> None:
    args = arguments()
    pool = asyncio.run(run(args))
    print(json.dumps({
        "instance": args.instance,
        "connections": args.connections,
        "attempts": pool.attempts,
        "refused": pool.refused,
        "full_at": pool.full_at,
        "gave_up": pool.gave_up,
    }), flush=True)


if __name__ == "__main__":
    main()
