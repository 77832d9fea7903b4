#!/usr/bin/env python3
"""The real thing beside the model: a fleet of real processes returning to a
recovering dependency through stormguard-client, three ways, and the herd
simulator's figures for the same set-up.

It starts, on loopback, a dependency that answers 503 for 10 s and then
accepts 200 requests in each calendar second (503 beyond), the real daemon
serving bench/real-fleet.yaml, and 20 client processes with 50 callers each,
every caller wanting one call served from the same instant. Three runs:

- full jitter: the policy without a send gate;
- per-process gates: the gate on, each process pacing by what it learns alone;
- fleet: the gate on, every process asking the daemon for its share.

For each it prints wasted requests (those the dependency refused), p50 and
p99 time to success and the callers that gave up, and beside them the means
of `stormguard simulate` over seeds 2001-2020 (kept for reports; ± is the
p99's spread, one standard deviation over them) with 20
processes, a 1 ms latency (loopback's order) and the callers' first tries
spread over 20 ms, as a real process's leave: each opens its connections
and its gate turns on at the first refusals, before the rest are sent (real
runs refuse 115-170 first tries in the outage's first second, the simulator
145-155 at 20 ms; all 1,000 with every first try at one instant, where
per-process gates then came out 1.8 s slower than the real ones). Target:
the real fleet run wastes at most 1.3x its simulation; exit 1 when it does
not.

With `--replicas N` it runs the fleet through N real daemons behind a
loopback proxy that deals connections to them as a Kubernetes Service does,
instead of the three ways above:

- alone: the replicas without a store, each pacing the processes it reaches;
- with `--pace-store`: the replicas sharing their pace through a real
  redis-server (started here). Targets: waste within 1.3x and p99 within
  0.5 s of the simulation (`simulate --fleet --replicas N --pace-store`);
  it also prints the Redis operations per second the shared pace cost;
- with `--kill-store-at S`: the same, Redis killed S seconds after the
  callers start (the dependency recovers at 10 s), beside the simulation
  of a store lost then (`--store-lost-at`). Target: p99 no worse than the
  replicas alone;
- with `--kill-replica-at S`: the same, the first replica killed at S.
  Target: every caller served;
- with `--restart-replicas-at S` (and `--pace-store`): the replicas
  restarted one at a time, 5 s apart from S, each stopped (SIGTERM) and started again
  on its port, beside `simulate --replicas-restart-at`; with
  `--restart-store-at S`, Redis restarted empty at S, beside
  `--store-restarted-at`; with `--reload-at S`, the policy file rewritten at
  S with herd-gated's `gate.quiet` changed. Targets: p99 within 0.3 s of
  the replicas sharing Redis undisturbed (within 1 s for Redis restarted
  empty);
- with `--fail-store-over-at S [--store-clock-behind D]` (and
  `--pace-store`): Redis failed over at S to a replica whose clock is D
  seconds behind (5 unless given), as Sentinel promotes one on another
  machine. A second redis-server replicates the first under libfaketime
  (Debian's faketime, `FAKETIME=-Ds`, the wall clock only; see
  CLOCK_BRIDGE for why it is preloaded with a small bridge compiled here),
  and its TIME is checked to read D behind (printed once); the daemons
  reach Redis through one loopback forwarder. At S the primary is killed
  (SIGKILL), the replica promoted (`REPLICAOF NO ONE`) and the forwarder
  moved to it, closing the connections it held so that the daemons
  reconnect. What the primary set to expire at a time expires D later on
  the replica. Beside `simulate --store-failed-over-at S
  --store-clock-behind Ds`. Targets: p99 within 1 s of the replicas sharing
  Redis undisturbed, and nothing paced faster: waste at most 1.3x theirs.

With `--languages rust,go,python` the processes are dealt in turn to the
three clients' herd examples (the Rust, Go and Python twins of one
process); with `--replicas` and `--pace-store` it also runs the same fleet
all in Rust, and the mixed fleet must waste within 1.3x of its simulation,
reach p99 within 0.5 s of it, and waste within 1.1x of the all-Rust fleet.

With `--link-delays 100ms,300ms,1s` it runs per-process gates and then
the fleet through one daemon across a loopback proxy that delays every byte
between the processes and the daemon by half of each round trip each way
(a daemon in another zone or region), beside `simulate --fleet
--feedback-delay` of the same round trip. Targets: each real p99 within
0.5 s of its simulation, and the fleet's no worse than per-process gates'
+ 0.3 s. It goes with `--dependency haproxy`.

With `--errors SHARE` it runs instead a healthy dependency that fails SHARE
of requests at random (503, or `--error-status`) and never runs out of capacity, the world of
`stormguard simulate --scenario errors`: open-loop callers, `--rate` calls a
second in all (300 unless given) arriving at random for 60 s, dealt to the
processes, under bench/real-fleet.yaml's `errors-jittered` (no gate),
`errors-gated` (the gate as shipped, `overloadWhen: evidence`) and
`errors-any-refusal` (the gate with `overloadWhen: any-refusal`, the default
before), where a call gives up a minute after it arrives. Five ways: no
gate, then per-process gates and the fleet through one daemon under each
gate setting. For each it prints the share of calls served and the p50 and p99
time to success from each call's arrival, beside the simulation's means.
Targets: each real run's p99 within its simulation's + 0.5 s; each gated way
serves at least 99 % of what no gate serves, with a p99 at most 1.2x no
gate's + 0.1 s. It also prints what the daemon judged of the dependency
while it paced it (`stormguard_fleet_judgement`, read every half second):
as shipped the gates watch and the daemon paces nothing; under
`any-refusal` a random failure is judged overloaded.

With `--errors SHARE --replicas N [--pace-store [--restart-replicas-at S]]`
it runs instead the gate as shipped (`errors-gated`) through N daemons behind
a Service, sharing Redis with `--pace-store`, and then the same with the
daemons restarted one at a time from S (as `--restart-replicas-at` above),
beside `simulate --scenario errors --replicas N --pace-store
[--replicas-restart-at S]`. Targets: each real p99 within its simulation's
+ 0.5 s; the restart changes neither what is served (at most 0.5 % less)
nor the p99 (at most + 0.3 s).

With `--brownout START,LASTING,CAPACITY` it runs the open-loop callers of
`--errors` (`--rate` calls a second in all, 100 unless given, for 60 s)
against the project's dependency with no random failures, taking 200
requests a calendar second but only CAPACITY a second in seconds [START,
START+LASTING) (whole seconds from the callers' start), the gate as shipped
(`errors-gated`) paced through the fleet: one daemon, or with `--replicas N
[--pace-store [--restart-replicas-at S]]` N daemons, undisturbed and then
restarted one at a time from S. It measures what the simulator's brownout
test does: the requests refused during the brownout (sent less accepted in
each of its seconds, from the dependency's /stats), as a share of the
excess (rate - CAPACITY) x LASTING, with the served share and p99, beside
`simulate --scenario errors --error-rate 0 --rate R --capacity 200
--brownout STARTs:LASTINGs:CAPACITY --replicas N --pace-store
[--replicas-restart-at S]`. Target: the restarted fleet refuses at most 5
points more of the excess than undisturbed.

With `--dependency healthy` the project's dependency comes back with no
limit: the herd is served as fast as its callers are let through, and the
gates have nothing to find. Targets: each gated way's real p99 within 0.5 s
of its simulation, and the fleet's no worse than per-process gates'.

With `--dependency haproxy` the herd returns instead to a real dependency
that is not this project's code: HAProxy's stick-table rate limit (200
requests a second, counting the ones it denies, as its guides configure it)
in front of Python's stock http.server, which comes up after the outage;
beside it, the simulator's `request-rate` model. Targets: each gated way's
real p99 within 0.5 s of its simulation, and the fleet's p99 no worse than
per-process gates' + 0.3 s. It goes with `--replicas N [--pace-store]`.

With `--dependency postgres` a real PostgreSQL (Debian's package) crashes
under a fleet of connection pools (`--connections` each, max_connections
their sum) 5 s after they are full, and is back 10 s later; each pool
slot reconnects through the client (`pg_pools`, the Rust example on
tokio-postgres, and its Python twin on psycopg). Four ways: a connection
pool's usual loop (2 s x 2^attempt, capped at 30 s, +-10 % jitter), full
jitter, per-process gates and the fleet. For each it prints the connect
attempts refused (unreachable, starting up, too many clients), the backends
the server started from the crash on, and when every pool was full again
after the restart, beside the simulator's herd of the same connects against
a dependency down for the outage (the pools fit max_connections, so only
the outage refuses). Targets: per-process gates and the fleet fill every
pool no later than the +-10 % loop, with at most half its refusals.

Usage: bench/real_fleet.py [--processes N] [--callers N] [--runs N] [--json FILE]
       [--dependency own|healthy|haproxy|postgres [--connections N]]
       [--languages L,L,...] [--replicas N [--pace-store] [--kill-store-at S] [--kill-replica-at S]
         [--restart-replicas-at S] [--restart-store-at S] [--reload-at S]
         [--fail-store-over-at S [--store-clock-behind D]]]
       [--link-delays D,D,...] [--errors SHARE [--rate R] [--error-status S]]
       [--brownout START,LASTING,CAPACITY [--rate R]]
(`--errors` and `--brownout` go with `--replicas N [--pace-store
[--restart-replicas-at S]]` and none of the other faults.)
It builds what it runs first (release: the daemon and the Rust client's
examples; the Go example with `go build` when Go is dealt processes).
"""
import argparse
import asyncio
import functools
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from dependencies import Haproxy, Postgres
from harness import BINARY, ROOT, ServiceProxy, free_port, redis_info, start_daemon, start_redis

EXAMPLES = os.path.join(ROOT, "target", "release", "examples")
GO_HERD = os.path.join(ROOT, "target", "go", "herd_callers")
PY_HERD = os.path.join(ROOT, "clients", "python", "examples", "herd_callers.py")
# Each client's herd process, as a command line.
HERDS = {
    "rust": [os.path.join(EXAMPLES, "herd_callers")],
    "go": [GO_HERD],
    "python": [sys.executable, PY_HERD],
}
POLICY = os.path.join(ROOT, "bench", "real-fleet.yaml")
SEEDS = range(2001, 2021)
OUTAGE, CAPACITY, LATENCY = 10, 200, "1ms"
# A rolling restart restarts one daemon replica every this many seconds.
RESTART_APART = 5
# How long a real herd's first tries take to leave its processes (see above).
FIRST_TRIES_OVER = "20ms"
# The --errors world: a capacity no run reaches, and the simulator's length
# of its errors scenario.
UNLIMITED, ERRORS_SECONDS = 1_000_000, 60
ERROR_WAYS = [
    ("no gate", "errors-jittered", [], ["--replicas", "1"]),
    ("per-process gates", "errors-gated", ["--no-fleet-pacing"], ["--no-fleet-pacing"]),
    ("fleet, one daemon", "errors-gated", [], ["--replicas", "1"]),
    ("gates, any-refusal", "errors-any-refusal", ["--no-fleet-pacing"], ["--no-fleet-pacing"]),
    ("fleet, any-refusal", "errors-any-refusal", [], ["--replicas", "1"]),
]
# (label, service in the policy file, callers' flags, simulate's flags)
WAYS = [
    ("full jitter", "herd-jittered", [], []),
    ("per-process gates", "herd-gated", ["--no-fleet-pacing"], ["--no-fleet-pacing"]),
    ("fleet", "herd-gated", [], ["--fleet"]),
]


def percentile(values, q):
    """The q-quantile of values, nearest rank, as the simulator reports it."""
    ordered = sorted(values)
    return ordered[max(0, int(q * len(ordered) + 0.999999) - 1)] if ordered else float("nan")


class OwnDependency:
    """The project's loopback dependency: the herd's (down for OUTAGE, then
    `capacity` a calendar second), or with `errors` one that fails that share
    at random, answering `status`, and never runs out of capacity, or with
    `brownout` (START, LASTING, CAPACITY: whole seconds from the start, and
    requests a second) one that is up from the start, takes `capacity` a
    second, and only CAPACITY a second from START for LASTING."""

    def __init__(self, start_at_ms, errors=None, status=503, capacity=CAPACITY, brownout=None):
        if errors is not None:
            world = ["--outage", "0", "--capacity", str(UNLIMITED), "--error-rate", str(errors),
                     "--error-status", str(status)]
        elif brownout is not None:
            world = ["--outage", "0", "--capacity", str(capacity), "--brownout", ",".join(map(str, brownout))]
        else:
            world = ["--outage", str(OUTAGE), "--capacity", str(capacity)]
        self.process = subprocess.Popen(
            [os.path.join(EXAMPLES, "recovering_dependency"), "--listen", "127.0.0.1:0",
             "--start-at", str(start_at_ms), *world],
            stdout=subprocess.PIPE, text=True)
        self.address = self.process.stdout.readline().strip()

    def stats(self):
        with urllib.request.urlopen(f"{self.address}/stats", timeout=5) as response:
            return json.load(response)

    def stop(self):
        self.process.kill()
        self.process.wait()


# The dependencies a herd can return to: the project's own (a calendar-second
# quota, or healthy: no limit once back), and real ones that are not this
# project's code; each with the simulator's model that matches it and the
# capacity it is simulated at.
DEPENDENCIES = {
    "own": (lambda start_at_ms: OwnDependency(start_at_ms), [], CAPACITY),
    "healthy": (lambda start_at_ms: OwnDependency(start_at_ms, capacity=UNLIMITED), [], UNLIMITED),
    "haproxy": (lambda start_at_ms: Haproxy(CAPACITY, start_at_ms / 1000 + OUTAGE),
                ["--dependency", "request-rate"], CAPACITY),
}


# libfaketime (Debian's faketime) sets the failed-over Redis's clock behind.
# Preloaded alone into Debian's redis-server it hangs before the server
# listens: jemalloc, which replaces malloc there, calls clock_gettime and
# pthread_cond_init while it starts, libfaketime starts itself in them, and
# its start allocates (a symbol it looks up and libc lacks), under jemalloc's
# start. This bridge, preloaded before it, keeps those two calls from it:
# clocks other than the wall clock read straight from the kernel (as
# FAKETIME_DONT_FAKE_MONOTONIC asks), and a condition variable without
# attributes is the zeroed one; the wall clock goes on to libfaketime.
CLOCK_BRIDGE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t clock, struct timespec *ts) {
    static int (*faked)(clockid_t, struct timespec *);
    if (clock != CLOCK_REALTIME && clock != CLOCK_REALTIME_COARSE)
        return syscall(SYS_clock_gettime, clock, ts);
    if (!faked)
        faked = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    return faked(clock, ts);
}

int pthread_cond_init(pthread_cond_t *cond, const pthread_condattr_t *attr) {
    static int (*next)(pthread_cond_t *, const pthread_condattr_t *);
    if (!attr) {
        memset(cond, 0, sizeof *cond);
        return 0;
    }
    if (!next)
        next = (int (*)(pthread_cond_t *, const pthread_condattr_t *))dlvsym(RTLD_NEXT, "pthread_cond_init",
                                                                               "GLIBC_2.3.2");
    return next(cond, attr);
}
"""
LIBFAKETIME = ["/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
               "/usr/local/lib/faketime/libfaketime.so.1"]


@functools.lru_cache(maxsize=None)
def clock_bridge():
    """CLOCK_BRIDGE built (with the C compiler cargo links with) and
    libfaketime found: the LD_PRELOAD that sets a process's clock behind."""
    found = [path for pattern in LIBFAKETIME for path in glob.glob(pattern)]
    if not found:
        raise RuntimeError("libfaketime not found: apt-get install faketime")
    directory = tempfile.mkdtemp(prefix="stormguard-clock-")
    source, bridge = os.path.join(directory, "bridge.c"), os.path.join(directory, "bridge.so")
    with open(source, "w") as f:
        f.write(CLOCK_BRIDGE)
    with open(os.path.join(directory, "bridge.map"), "w") as f:
        f.write("GLIBC_2.3.2 { pthread_cond_init; };\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", bridge, source, "-ldl",
                    f"-Wl,--version-script={os.path.join(directory, 'bridge.map')}"], check=True)
    return f"{bridge} {found[0]}"


def start_behind(primary, behind):
    """A redis-server replicating the one on port `primary`, flagged as
    harness.start_redis's, under libfaketime `behind` seconds behind (as
    `faketime -f -<behind>s`, its wall clock only), once it has synced:
    (process, port)."""
    port = free_port()
    clock = {"LD_PRELOAD": clock_bridge(), "FAKETIME": f"-{behind:g}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
             "FAKETIME_NO_CACHE": "1"}
    replica = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                "--dir", tempfile.mkdtemp(prefix="stormguard-redis-"),
                                "--appendonly", "no", "--replicaof", "127.0.0.1", str(primary)],
                               stdout=subprocess.DEVNULL, env={**os.environ, **clock})
    for _ in range(200):
        try:
            if redis_info(port, "replication").get("master_link_status") == "up":
                return replica, port
        except OSError:
            pass
        time.sleep(0.05)
    replica.kill()
    replica.wait()
    raise RuntimeError("the replica redis-server did not start and sync under libfaketime")


def redis_call(port, *words):
    """One command to the Redis on `port`, and its reply: a string, a
    number, or a list of them."""
    request = f"*{len(words)}\r\n" + "".join(f"${len(word)}\r\n{word}\r\n" for word in words)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(request.encode())
        return redis_reply(s.makefile("rb"))


def redis_reply(reader):
    """One RESP reply read from `reader`; an error reply raised."""
    line = reader.readline().decode().rstrip("\r\n")
    kind, rest = line[:1], line[1:]
    if kind == "+":
        return rest
    if kind == ":":
        return int(rest)
    if kind == "$":
        return None if int(rest) < 0 else reader.read(int(rest) + 2)[:-2].decode()
    if kind == "*":
        return [redis_reply(reader) for _ in range(int(rest))]
    raise RuntimeError(f"Redis answered {line!r}")


def clock_behind(primary, replica):
    """How far the TIME of the Redis on port `replica` reads behind that on
    `primary`, in seconds (the primary read either side of it)."""
    def now(port):
        seconds, micros = redis_call(port, "TIME")
        return int(seconds) + int(micros) / 1e6

    before, behind, after = now(primary), now(replica), now(primary)
    return (before + after) / 2 - behind


class StoreAddress(ServiceProxy):
    """The one loopback address the daemons reach Redis through, which
    moves in a failover (as Sentinel-aware clients or a Service's endpoints
    follow it): it forwards each connection to the Redis on `port`, and
    `move` sends the next ones to another and closes those it holds, so
    that the daemons reconnect there."""

    def __init__(self, port):
        self.held = set()
        super().__init__([port])

    async def _serve(self, reader, writer):
        self.held.add(writer)
        try:
            await super()._serve(reader, writer)
        finally:
            self.held.discard(writer)

    def move(self, port):
        async def cut():
            # Closed rather than cancelled: each forwarding then ends as a
            # lost connection does.
            self.ports = [port]
            for writer in list(self.held):
                writer.close()

        asyncio.run_coroutine_threadsafe(cut(), self.loop).result(timeout=10)


class Fleet:
    """How the processes reach the daemon: `replicas` real daemons (behind
    a Service's proxy when more than one), sharing a real Redis if `store`;
    Redis killed `kill_store_at` seconds after the callers start, the first
    replica `kill_replica_at` seconds after; Redis restarted empty at
    `restart_store_at`; Redis failed over at `fail_store_over_at` to its
    replica, whose clock is `store_clock_behind` seconds behind (the primary
    killed, the replica promoted, the daemons' one address for Redis moved
    to it); the replicas restarted one at a time, RESTART_APART
    seconds apart, from `restart_replicas_at` (each stopped with SIGTERM and
    started again on its port); the policy file rewritten at `reload_at` with the gate's
    `quiet` changed (a setting that shapes no judgement); across a link of
    `link_delay` seconds' round trip if given."""

    def __init__(self, replicas=1, store=False, kill_store_at=None, kill_replica_at=None, link_delay=0.0,
                 restart_store_at=None, restart_replicas_at=None, reload_at=None, fail_store_over_at=None,
                 store_clock_behind=5.0):
        self.replicas, self.store = replicas, store
        self.kill_store_at, self.kill_replica_at = kill_store_at, kill_replica_at
        self.restart_store_at, self.restart_replicas_at = restart_store_at, restart_replicas_at
        self.fail_store_over_at, self.store_clock_behind = fail_store_over_at, store_clock_behind
        self.reload_at = reload_at
        self.link_delay = link_delay
        # How far the failover's replica read behind, each run (its TIME).
        self.measured_behind = []

    def start(self, start_at):
        """Starts it all; the daemon URL the processes use."""
        self.redis = start_redis() if self.store else None
        self.replica, self.store_address = None, None
        store_port = self.redis[1] if self.redis else None
        if self.redis and self.fail_store_over_at is not None:
            store_port = self.start_failover()
        self.flags = ["--pace-store", f"redis://127.0.0.1:{store_port}"] if self.redis else []
        self.policy = POLICY
        if self.reload_at is not None:
            self.policy = os.path.join(tempfile.mkdtemp(prefix="stormguard-reload-"), "policy.yaml")
            shutil.copy(POLICY, self.policy)
        self.daemons = [start_daemon(self.policy, *self.flags) for _ in range(self.replicas)]
        ports = [port for _, port in self.daemons]
        self.proxy = ServiceProxy(ports, self.link_delay) if self.replicas > 1 or self.link_delay else None
        self.commands_before = self.commands()
        events = [(self.kill_store_at, self.kill_store), (self.kill_replica_at, self.kill_replica),
                  (self.restart_store_at, self.restart_store), (self.reload_at, self.reload),
                  (self.fail_store_over_at, self.fail_store_over)]
        if self.restart_replicas_at is not None:
            events += [(self.restart_replicas_at + RESTART_APART * i, functools.partial(self.restart_replica, i))
                       for i in range(self.replicas)]
        self.timers = [
            threading.Timer(start_at / 1000 + at - time.time(), event)
            for at, event in events
            if at is not None
        ]
        for timer in self.timers:
            timer.start()
        return f"http://127.0.0.1:{self.proxy.port if self.proxy else self.daemons[0][1]}"

    def start_failover(self):
        """Redis's replica, its clock behind (checked by its TIME), and the
        address the daemons reach Redis through: its port."""
        self.replica = start_behind(self.redis[1], self.store_clock_behind)
        behind = clock_behind(self.redis[1], self.replica[1])
        if abs(behind - self.store_clock_behind) > 0.5:
            for process, _ in (self.redis, self.replica):
                process.kill()
                process.wait()
            raise RuntimeError(f"the replica's TIME reads {behind:.3f} s behind the primary's, not "
                               f"{self.store_clock_behind:g} s: libfaketime did not set its clock")
        self.measured_behind.append(behind)
        self.store_address = StoreAddress(self.redis[1])
        return self.store_address.port

    def commands(self):
        """Script runs and all commands Redis has executed, while it lives."""
        if not self.redis or self.redis[0].poll() is not None:
            return None
        stats = redis_info(self.redis[1], "commandstats")
        calls = {key: int(value.split(",")[0].split("=")[1]) for key, value in stats.items()}
        scripts = sum(n for key, n in calls.items() if key in ("cmdstat_evalsha", "cmdstat_eval"))
        return scripts, sum(calls.values())

    def kill_store(self):
        self.redis[0].kill()

    def kill_replica(self):
        self.daemons[0][0].kill()

    def restart_replica(self, i):
        """Replica `i` stopped as a Deployment's rollout stops a pod
        (SIGTERM: it gives up the paces it owns on its way out) and started
        again on its port: what it held in memory is gone; the store's pace
        outlives it."""
        process, port = self.daemons[i]
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.daemons[i] = start_daemon(self.policy, *self.flags, port=port)

    def restart_store(self):
        """Redis killed and started again, empty, on its port."""
        process, port = self.redis
        process.kill()
        process.wait()
        self.redis = start_redis(port)

    def fail_store_over(self):
        """Redis failed over as Sentinel does it: the primary lost
        (SIGKILL), its replica promoted, the daemons' address for Redis moved
        to it and their connections cut. The replica had every write; its
        clock is behind, so what the primary set to expire at a time expires
        that much later on it."""
        process, _ = self.redis
        process.kill()
        process.wait()
        redis_call(self.replica[1], "REPLICAOF", "NO", "ONE")
        self.store_address.move(self.replica[1])

    def reload(self):
        """The policy rewritten with herd-gated's `quiet` changed, as an
        operator edits a ConfigMap mid-incident."""
        with open(self.policy) as f:
            text = f.read()
        with open(self.policy, "w") as f:
            f.write(text.replace("  herd-gated:\n    gate:\n      enabled: true\n",
                                 "  herd-gated:\n    gate:\n      enabled: true\n      quiet: 7s\n", 1))

    def stop(self):
        for timer in self.timers:
            timer.cancel()
        for proxy in (self.proxy, self.store_address):
            if proxy:
                proxy.stop()
        for process in [d for d, _ in self.daemons] + [r[0] for r in (self.redis, self.replica) if r]:
            process.kill()
            process.wait()


class Judgements:
    """What the daemons' rate laws judged of `service` while it was paced,
    read from their /metrics every half second: seconds per judgement (a
    daemon's, on average over them), and the mean share refused they rested on."""

    EVERY = 0.5

    def __init__(self, ports, service):
        self.ports, self.service = ports, service
        self.seconds, self.shares = {}, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self):
        judged = f'service="{self.service}"'
        while not self.done.wait(self.EVERY):
            for port in self.ports:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                        text = response.read().decode()
                except OSError:
                    continue
                for line in text.splitlines():
                    if judged not in line:
                        continue
                    if line.startswith("stormguard_fleet_judgement{") and line.endswith(" 1"):
                        name = line.split('judgement="', 1)[1].split('"', 1)[0]
                        self.seconds[name] = self.seconds.get(name, 0) + self.EVERY / len(self.ports)
                    elif line.startswith("stormguard_fleet_refused_ratio{"):
                        self.shares.append(float(line.rsplit(" ", 1)[1]))

    def stop(self):
        self.done.set()
        self.thread.join()
        return {"seconds": self.seconds,
                "refused_share": statistics.mean(self.shares) if self.shares else None}


def judged(summary):
    """A run's judgements in a few words: 'overloaded 18 s, recovering 2 s
    (refused 10.1 %)', or that the daemon paced nothing."""
    if not summary["seconds"]:
        return "not paced by the daemon"
    parts = ", ".join(f"{name} {sec:g} s" for name, sec in sorted(summary["seconds"].items(), key=lambda kv: -kv[1]))
    return f"{parts} (refused {summary['refused_share']:.1%})"


def last_lines(processes, timeout):
    """The JSON line each of `processes` prints last, once it has exited well."""
    results = []
    for process in processes:
        out, _ = process.communicate(timeout=timeout)
        if process.returncode != 0:
            raise RuntimeError(f"a client process failed ({process.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def real_run(service, flags, processes, callers, fleet=None, languages=("rust",), errors=None, status=503,
             dependency="own", brownout=None):
    """One run of the real fleet, its processes dealt in turn to
    `languages`' clients: wasted, p50, p99, gave up, the dependency's
    per-second counts, and what Redis did if there was one. With `errors`,
    the dependency fails that share at random, answering `status`, and
    `flags` make the calls arrive (open loop) rather than `callers` calls
    at once; with `brownout` (START, LASTING, CAPACITY) it browns out
    instead, and `flags` make the calls arrive."""
    fleet = fleet or Fleet()
    python_path = os.path.join(ROOT, "clients", "python")
    environment = {**os.environ, "PYTHONPATH": python_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start_at = int(time.time() * 1000) + 3000
    daemon_url = fleet.start(start_at)
    dependency = (OwnDependency(start_at, errors, status, brownout=brownout)
                  if errors is not None or brownout is not None else DEPENDENCIES[dependency][0](start_at))
    address = dependency.address
    judgements = Judgements([port for _, port in fleet.daemons], service)
    herd = []
    try:
        herd += [
            subprocess.Popen(
                [*HERDS[languages[i % len(languages)]], "--daemon", daemon_url,
                 "--service", service, "--instance", f"pod-{i}", "--dependency", address,
                 "--callers", str(callers), "--start-at", str(start_at), "--seed", str(i + 1), *flags],
                stdout=subprocess.PIPE, text=True, env=environment)
            for i in range(processes)
        ]
        results = last_lines(herd, 900)
        stats = dependency.stats()
        paced_for = time.time() - start_at / 1000
        commands = fleet.commands()
    finally:
        judged_while = judgements.stop()
        for process in herd:
            process.kill()
            process.wait()
        dependency.stop()
        fleet.stop()
    seconds = [s for r in results for s in r["seconds"]]
    redis = None
    if commands and fleet.commands_before:
        scripts, total = (after - before for after, before in zip(commands, fleet.commands_before))
        redis = {"seconds": paced_for, "scripts_per_second": scripts / paced_for,
                 "commands_per_second": total / paced_for}
    succeeded = sum(r["succeeded"] for r in results)
    return {
        "redis": redis,
        "served_share": succeeded / max(succeeded + sum(r["gave_up"] for r in results), 1),
        "wasted": stats["received"] - stats["accepted"],
        "p50_seconds": percentile(seconds, 0.50),
        "p99_seconds": percentile(seconds, 0.99),
        "gave_up": sum(r["gave_up"] for r in results),
        "attempts": sum(r["attempts"] for r in results),
        "requests_per_second": stats["requests_per_second"],
        "accepted_per_second": stats["accepted_per_second"],
        "judged": judged_while,
    }


def simulated(service, flags, processes, callers, dependency="own"):
    """Means over SEEDS of the simulator's run of the same set-up, on the
    model of `dependency`."""
    _, model, capacity = DEPENDENCIES[dependency]
    flags = [*flags, *model]
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", service,
             "--clients", str(processes * callers), "--processes", str(processes),
             "--capacity", str(capacity), "--outage", f"{OUTAGE}s", "--latency", LATENCY,
             "--spread", FIRST_TRIES_OVER, *([] if "--replicas" in flags else ["--replicas", "1"]), *flags],
            check=True, capture_output=True, text=True).stdout
        run = json.loads(text)
        runs.append(run[-1] if isinstance(run, list) else run)
    return sim_means(runs, ("wasted", "p50_seconds", "p99_seconds", "gave_up"))


def sim_means(runs, keys):
    """The means over the seeds' runs of `keys`, and the p99's spread (one
    standard deviation over the seeds) as `p99_spread_seconds`."""
    means = {key: statistics.mean(r[key] or 0.0 for r in runs) for key in keys}
    means["p99_spread_seconds"] = statistics.stdev(r["p99_seconds"] or 0.0 for r in runs) if len(runs) > 1 else 0.0
    return means


def errors_runs(service, flags, processes, errors, status, rate):
    """The simulator's errors scenario for the same set-up, one run a seed of SEEDS."""
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", service,
             "--scenario", "errors", "--error-rate", str(errors), "--error-status", str(status),
             "--rate", str(rate),
             "--processes", str(processes), "--latency", LATENCY, "--horizon", "30m", *flags],
            check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(text))
    return runs


def simulated_errors(service, flags, processes, errors, status, rate):
    """Means over SEEDS of the simulator's errors scenario for the same set-up."""
    return sim_means(errors_runs(service, flags, processes, errors, status, rate),
                     ("served_share", "p50_seconds", "p99_seconds"))


def shared_ways(opts):
    """The fleet through `--replicas` daemons in an open-loop world: sharing
    Redis (alone without `--pace-store`), and with `--restart-replicas-at`
    the same restarted one at a time: (label, fleet, simulate's flags)."""
    n = opts.replicas
    shared = ["--replicas", str(n), *(["--pace-store"] if opts.pace_store else [])]
    ways = [(f"{n} daemons sharing Redis" if opts.pace_store else f"{n} daemons alone",
             Fleet(n, store=opts.pace_store), shared)]
    if opts.restart_replicas_at is not None:
        ways.append((f"  rolling restart from {opts.restart_replicas_at:g} s",
                     Fleet(n, store=True, restart_replicas_at=opts.restart_replicas_at),
                     [*shared, "--replicas-restart-at", f"{opts.restart_replicas_at:g}s"]))
    return ways


def error_ways(opts):
    """The ways of the --errors world: (label, service, callers' flags,
    simulate's flags, fleet). Through one daemon: no gate, per-process gates
    and the fleet under each gate setting; with `--replicas`, the gate as
    shipped through them, undisturbed and restarted (shared_ways)."""
    if opts.replicas is None:
        return [(label, service, flags, sim_flags, None) for label, service, flags, sim_flags in ERROR_WAYS]
    return [(label, "errors-gated", [], sim_flags, fleet) for label, fleet, sim_flags in shared_ways(opts)]


def unchanged_by_restart(label, got, steady):
    """A restart's targets in an open-loop world: served at least what it
    served undisturbed (`steady`) less 0.5 %, with a p99 at most its + 0.3 s."""
    return [(f"{label.strip()}: served {got['served_share']:.2%}, undisturbed {steady['served_share']:.2%} "
             f"(at most 0.5 % less)", got["served_share"] >= steady["served_share"] - 0.005),
            (f"{label.strip()}: p99 {got['p99_seconds']:.3f} s, undisturbed {steady['p99_seconds']:.3f} s "
             f"(within + 0.3 s)", got["p99_seconds"] <= steady["p99_seconds"] + 0.3)]


def errors_world(opts):
    """No gate, per-process gates and the fleet through one daemon against
    a dependency failing `--errors` at random, real beside simulated; with
    `--replicas`, the fleet through them, undisturbed and restarted."""
    per_process = opts.rate / opts.processes
    mixed = f" ({'+'.join(opts.languages)})" if list(opts.languages) != ["rust"] else ""
    ways = error_ways(opts)
    through = "" if opts.replicas is None else f", the gate as shipped through {ways[0][0]}"
    print(f"{opts.processes} processes{mixed}{through}, {opts.rate:g} calls a second in all arriving at random for "
          f"{ERRORS_SECONDS} s; the dependency fails {opts.errors:.0%} at random ({opts.error_status}) and never runs out of "
          f"capacity; a call gives up 60 s after it arrives; real: mean of {opts.runs} run(s), simulated: mean "
          f"of seeds {SEEDS.start}-{SEEDS.stop - 1}, latency {LATENCY}")
    print()
    width = max(20, *(len(way[0]) for way in ways))
    print(f"{'':{width}} {'served':>17} {'p50 s':>17} {'p99 s':>24}")
    print(f"{'':{width}} {'real':>8} {'sim':>8} {'real':>8} {'sim':>8} {'real':>8} {'sim':>8} {'±':>6}")
    report, means, targets = {}, {}, []
    arrivals = ["--rate", f"{per_process:g}", "--seconds", str(ERRORS_SECONDS)]
    for label, service, flags, sim_flags, fleet in ways:
        reals = [real_run(service, [*arrivals, *flags], opts.processes, 0, fleet, languages=opts.languages,
                          errors=opts.errors, status=opts.error_status) for _ in range(opts.runs)]
        sim = simulated_errors(service, sim_flags, opts.processes, opts.errors, opts.error_status, opts.rate)
        real = {key: statistics.mean(r[key] for r in reals) for key in ("served_share", "p50_seconds", "p99_seconds")}
        report[label], means[label] = {"real": reals, "simulated": sim}, real
        print(f"{label:{width}} {real['served_share']:8.2%} {sim['served_share']:8.2%} {real['p50_seconds']:8.3f} "
              f"{sim['p50_seconds']:8.3f} {real['p99_seconds']:8.3f} {sim['p99_seconds']:8.3f} "
              f"{sim['p99_spread_seconds']:6.3f}")
        worst = max(r["p99_seconds"] for r in reals)
        targets.append((f"{label.strip()}: real p99 {worst:.3f} s, simulated {sim['p99_seconds']:.3f} s "
                        f"(within + 0.5 s)", worst <= sim["p99_seconds"] + 0.5))
    print()
    print("what the daemon judged while it paced the dependency (its /metrics, every 0.5 s), first real run:")
    for label, *_ in ways:
        print(f"{label:{width}} {judged(report[label]['real'][0]['judged'])}")
    print()
    if opts.replicas is not None:
        for label, *_ in ways[1:]:
            targets += unchanged_by_restart(label, means[label], means[ways[0][0]])
        return report, all([verdict(what, ok) for what, ok in targets])
    base = means["no gate"]
    # The gate as shipped is held to the targets; any-refusal is reported
    # beside it.
    for label in [label for label, service, *_ in ERROR_WAYS[1:] if service == "errors-gated"]:
        got = means[label]
        targets.append((f"{label}: served {got['served_share']:.2%} of calls, no gate {base['served_share']:.2%} "
                        f"(at least 99 % of it)", got["served_share"] >= 0.99 * base["served_share"]))
        limit = 1.2 * base["p99_seconds"] + 0.1
        targets.append((f"{label}: p99 {got['p99_seconds']:.3f} s (at most 1.2x no gate's + 0.1 s: {limit:.3f} s)",
                        got["p99_seconds"] <= limit))
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


def refused_in_brownout(run, brownout):
    """Requests refused in the seconds of `brownout` (START, LASTING,
    CAPACITY), from a run's per-second counts (sent less accepted): what
    the simulator's brownout test counts."""
    start, lasting, _ = brownout
    window = slice(start, start + lasting)
    return sum(sent - accepted for sent, accepted in
               zip(run["requests_per_second"][window], run["accepted_per_second"][window]))


def simulated_brownout(flags, processes, rate, brownout):
    """Means over SEEDS of the simulator's errors scenario with no random
    failures and the brownout, the dependency taking CAPACITY otherwise:
    the refused share of the excess (± its spread over the seeds), served
    share, p50 and p99."""
    start, lasting, capacity = brownout
    excess = (rate - capacity) * lasting
    runs = errors_runs("errors-gated", ["--capacity", str(CAPACITY), "--brownout", f"{start}s:{lasting}s:{capacity}",
                                        *flags], processes, 0, 503, rate)
    for run in runs:
        run["refused_share"] = refused_in_brownout(run, brownout) / excess
    means = sim_means(runs, ("refused_share", "served_share", "p50_seconds", "p99_seconds"))
    means["refused_spread"] = statistics.stdev(r["refused_share"] for r in runs) if len(runs) > 1 else 0.0
    return means


def brownout_world(opts):
    """Open-loop callers through a brownout of the project's dependency, the
    gate as shipped paced through the fleet (one daemon, or `--replicas`):
    the calls refused during it as a share of those above its capacity,
    undisturbed and with the daemons restarted one at a time, beside the
    simulation."""
    start, lasting, capacity = opts.brownout
    excess = (opts.rate - capacity) * lasting
    mixed = f" ({'+'.join(opts.languages)})" if list(opts.languages) != ["rust"] else ""
    if opts.replicas is None:
        ways = [("fleet, one daemon", Fleet(), ["--replicas", "1"])]
    else:
        ways = shared_ways(opts)
    print(f"{opts.processes} processes{mixed}, {opts.rate:g} calls a second in all arriving at random for "
          f"{ERRORS_SECONDS} s; the dependency takes {CAPACITY} a second, only {capacity} a second from {start} s "
          f"for {lasting} s ({excess:,.0f} calls above it); the gate as shipped through the fleet; a call gives up "
          f"60 s after it arrives; real: mean of {opts.runs} run(s), simulated: mean of seeds "
          f"{SEEDS.start}-{SEEDS.stop - 1}, latency {LATENCY}")
    print()
    width = max(20, *(len(way[0]) for way in ways))
    print(f"{'':{width}} {'refused in the brownout':>24} {'served':>17} {'p99 s':>24}")
    print(f"{'':{width}} {'real':>8} {'sim':>8} {'±':>6} {'real':>8} {'sim':>8} {'real':>8} {'sim':>8} {'±':>6}")
    arrivals = ["--rate", f"{opts.rate / opts.processes:g}", "--seconds", str(ERRORS_SECONDS)]
    report, means, targets = {}, {}, []
    for label, fleet, sim_flags in ways:
        reals = [real_run("errors-gated", arrivals, opts.processes, 0, fleet, opts.languages,
                          brownout=opts.brownout) for _ in range(opts.runs)]
        for run in reals:
            run["refused_share"] = refused_in_brownout(run, opts.brownout) / excess
        sim = simulated_brownout(sim_flags, opts.processes, opts.rate, opts.brownout)
        real = {key: statistics.mean(r[key] for r in reals) for key in ("refused_share", "served_share", "p99_seconds")}
        report[label], means[label] = {"real": reals, "simulated": sim}, real
        print(f"{label:{width}} {real['refused_share']:8.1%} {sim['refused_share']:8.1%} {sim['refused_spread']:6.1%} "
              f"{real['served_share']:8.2%} {sim['served_share']:8.2%} {real['p99_seconds']:8.3f} "
              f"{sim['p99_seconds']:8.3f} {sim['p99_spread_seconds']:6.3f}")
    print()
    print("what the daemon judged while it paced the dependency (its /metrics, every 0.5 s), first real run:")
    for label, *_ in ways:
        print(f"{label:{width}} {judged(report[label]['real'][0]['judged'])}")
    print()
    base = means[ways[0][0]]
    for label, *_ in ways[1:]:
        got = means[label]
        targets.append((f"{label.strip()}: refused {got['refused_share']:.1%} of the excess in the brownout, "
                        f"undisturbed {base['refused_share']:.1%} (at most 5 points more)",
                        got["refused_share"] <= base["refused_share"] + 0.05))
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


# The --dependency postgres world: each process's pool of connections, and
# the ways it reconnects after the database crashes.
PG_POOLS = {
    "rust": [os.path.join(EXAMPLES, "pg_pools")],
    "python": [sys.executable, os.path.join(ROOT, "clients", "python", "examples", "pg_pools.py")],
}
PG_WAYS = [
    ("2 s x 2^n, +-10 % jitter", "reconnect-proportional", []),
    ("full jitter", "herd-jittered", []),
    ("per-process gates", "herd-gated", ["--no-fleet-pacing"]),
    ("fleet, one daemon", "herd-gated", []),
]
# When the database crashes after the pools are first full, and how long it stays down.
PG_CRASH_AFTER, PG_AFTER_BACK = 5, 25


def postgres_run(service, flags, processes, connections, languages):
    """One crash of a real PostgreSQL under `processes` pools of
    `connections` each: the connect attempts refused by kind, the backends
    the server started from the restart on, and when every pool was full again."""
    capacity = processes * connections
    database, fleet = Postgres(capacity), Fleet()
    python_path = os.path.join(ROOT, "clients", "python")
    environment = {**os.environ, "PYTHONPATH": python_path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start_at = int(time.time() * 1000) + 3000
    crash_at = start_at + PG_CRASH_AFTER * 1000
    until = crash_at + (OUTAGE + PG_AFTER_BACK) * 1000
    daemon_url = fleet.start(start_at)
    herd, marks = [], {}

    def crash():
        marks["received"] = database.connections_received()
        database.crash()

    def restart():
        database.start()
        marks["back"] = time.time() * 1000

    timers = [threading.Timer(crash_at / 1000 - time.time(), crash),
              threading.Timer(crash_at / 1000 + OUTAGE - time.time(), restart)]
    try:
        for timer in timers:
            timer.start()
        herd = [
            subprocess.Popen(
                [*PG_POOLS[languages[i % len(languages)]], "--daemon", daemon_url, "--service", service,
                 "--instance", f"pod-{i}", "--dsn", database.dsn, "--connections", str(connections),
                 "--start-at", str(start_at), "--until", str(until), "--seed", str(i + 1), *flags],
                stdout=subprocess.PIPE, text=True, env=environment)
            for i in range(processes)
        ]
        results = last_lines(herd, 300)
        backends = database.connections_received() - marks["received"]
    finally:
        for timer in timers:
            timer.cancel()
        for process in herd:
            process.kill()
            process.wait()
        fleet.stop()
        database.stop()
    refilled = [min((at for at in r["full_at"] if at >= marks["back"]), default=None) for r in results]
    refused = {kind: sum(r["refused"][kind] for r in results) for kind in results[0]["refused"]}
    return {
        "refused": sum(refused.values()),
        "refused_by_kind": refused,
        "backends_started": backends,
        "attempts": sum(r["attempts"] for r in results),
        "gave_up": sum(r["gave_up"] for r in results),
        "full_after_seconds": (max(refilled) - marks["back"]) / 1000 if None not in refilled else float("inf"),
    }


def simulated_postgres(service, flags, processes, connections):
    """Means over SEEDS of the simulator's herd for the same crash: every
    slot's connect a call, from the crash on, against a dependency down for
    the outage that then takes them all (the pools fit max_connections, so
    only the outage refuses): refused attempts, and when the last was served
    after the restart."""
    runs = []
    for seed in SEEDS:
        text = subprocess.run(
            [BINARY, "simulate", "--json", "--seed", str(seed), "--policy", POLICY, "--service", service,
             "--clients", str(processes * connections), "--processes", str(processes),
             "--capacity", str(UNLIMITED), "--outage", f"{OUTAGE}s", "--latency", LATENCY,
             *(["--no-fleet-pacing"] if "--no-fleet-pacing" in flags else ["--replicas", "1"])],
            check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(text))
    return {"refused": statistics.mean(r["wasted"] for r in runs),
            "full_after_seconds": statistics.mean(r["last_success_seconds"] - OUTAGE for r in runs)}


def postgres_world(opts):
    """A real PostgreSQL crashing under a fleet of connection pools, and
    the pools reconnecting four ways."""
    processes, connections = opts.processes, opts.connections
    mixed = f" ({'+'.join(opts.languages)})" if list(opts.languages) != ["rust"] else ""
    print(f"{processes} processes{mixed} x a pool of {connections} connections to a real PostgreSQL "
          f"(max_connections {processes * connections} for them); it crashes {PG_CRASH_AFTER} s after the pools "
          f"are filled and is back {OUTAGE} s later; real: mean of {opts.runs} run(s)")
    print()
    print(f"{'':28} {'refused':>8} {'sim':>6} {'unreachable':>12} {'starting up':>12} {'too many':>9} "
          f"{'backends':>9} {'all full s':>11} {'sim':>6}")
    report, means = {}, {}
    for label, service, flags in PG_WAYS:
        runs = [postgres_run(service, flags, processes, connections, opts.languages) for _ in range(opts.runs)]
        mean = {key: statistics.mean(r[key] for r in runs)
                for key in ("refused", "backends_started", "full_after_seconds", "gave_up")}
        kinds = {kind: statistics.mean(r["refused_by_kind"][kind] for r in runs) for kind in runs[0]["refused_by_kind"]}
        sim = simulated_postgres(service, flags, processes, connections)
        report[label], means[label] = {"real": runs, "simulated": sim}, mean
        print(f"{label:28} {mean['refused']:8,.0f} {sim['refused']:6,.0f} {kinds['unreachable']:12,.0f} "
              f"{kinds['starting_up']:12,.0f} {kinds['too_many_clients']:9,.0f} {mean['backends_started']:9,.0f} "
              f"{mean['full_after_seconds']:11.2f} {sim['full_after_seconds']:6.2f}")
    print()
    base = means[PG_WAYS[0][0]]
    targets = []
    for label in ("per-process gates", "fleet, one daemon"):
        got = means[label]
        targets.append((f"{label}: every pool full {got['full_after_seconds']:.2f} s after the restart, "
                        f"+-10 % jitter {base['full_after_seconds']:.2f} s (no later)",
                        got["full_after_seconds"] <= base["full_after_seconds"]))
        targets.append((f"{label}: {got['refused']:,.0f} connect attempts refused, +-10 % jitter "
                        f"{base['refused']:,.0f} (at most half)", got["refused"] <= base["refused"] / 2))
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


def build(languages):
    for what in (["--bin", "stormguard"], ["-p", "stormguard-client", "--examples"]):
        subprocess.run(["cargo", "build", "--release", "--quiet", *what], cwd=ROOT, check=True)
    if "go" in languages:
        subprocess.run(["go", "build", "-o", GO_HERD, "./examples/herd_callers"], cwd=os.path.join(ROOT, "clients", "go"),
                       env={**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off"}, check=True)


def mean_of(runs):
    return {key: statistics.mean(r[key] for r in runs) for key in ("wasted", "p50_seconds", "p99_seconds", "gave_up")}


# What each dependency does once back, in words.
LIMITS = {
    "own": f"{CAPACITY} requests per calendar second (this project's loopback dependency; simulated as a quota)",
    "healthy": "no limit: this project's loopback dependency takes everything once back",
    "haproxy": f"HAProxy's stick-table limit of {CAPACITY} requests a second, counting the ones it denies, in "
               f"front of Python's http.server (simulated as a request-rate limit)",
}


def header(opts, what):
    print(f"{opts.processes} processes x {opts.callers} callers{what}; dependency down {OUTAGE} s, "
          f"then {LIMITS[opts.dependency]}; real: mean of {opts.runs} run(s), "
          f"simulated: mean of seeds {SEEDS.start}-{SEEDS.stop - 1}, latency {LATENCY}")
    print()
    print(f"{'':34} {'wasted':>15} {'p50 s':>13} {'p99 s':>19} {'gave up':>13}")
    print(f"{'':34} {'real':>7} {'sim':>7} {'real':>6} {'sim':>6} {'real':>6} {'sim':>6} {'±':>5} {'real':>6} {'sim':>6}")


def row(label, real, sim):
    cell = lambda value, fmt: format(value, fmt) if sim else "—".rjust(len(format(0, fmt)))
    sim = sim or {}
    print(f"{label:34} {real['wasted']:7,.0f} {cell(sim.get('wasted', 0), '7,.0f')} "
          f"{real['p50_seconds']:6.2f} {cell(sim.get('p50_seconds', 0), '6.2f')} "
          f"{real['p99_seconds']:6.2f} {cell(sim.get('p99_seconds', 0), '6.2f')} "
          f"{cell(sim.get('p99_spread_seconds', 0), '5.2f')} {real['gave_up']:6.0f} {cell(sim.get('gave_up', 0), '6.1f')}")


def verdict(what, met):
    print(f"{what}: {'met' if met else 'NOT MET'}")
    return met


def one_daemon(opts):
    """Full jitter, per-process gates and the fleet through one daemon."""
    header(opts, "")
    report, means, targets = {}, {}, []
    for label, service, flags, sim_flags in WAYS:
        reals = [real_run(service, flags, opts.processes, opts.callers, languages=opts.languages,
                          dependency=opts.dependency)
                 for _ in range(opts.runs)]
        real = mean_of(reals)
        sim = simulated(service, sim_flags, opts.processes, opts.callers, opts.dependency)
        report[label], means[label] = {"real": reals, "simulated": sim}, real
        row(label, real, sim)
        if opts.dependency != "own" and label != "full jitter":
            gap = real["p99_seconds"] - sim["p99_seconds"]
            targets.append((f"{label}: real p99 - simulated {gap:+.2f} s (within 0.5 s)", abs(gap) <= 0.5))
    print()
    fleet, gates = means["fleet"], means["per-process gates"]
    if opts.dependency == "own":
        ratio = fleet["wasted"] / max(report["fleet"]["simulated"]["wasted"], 1)
        targets.append((f"fleet, real waste / simulated waste: {ratio:.2f} (target: at most 1.3)", ratio <= 1.3))
    else:
        # Back healthy, the gates have nothing to find: the fleet must spend
        # its grants as they come, no slower than each process alone.
        slack = 0.0 if opts.dependency == "healthy" else 0.3
        targets.append((f"fleet p99 {fleet['p99_seconds']:.2f} s, per-process gates {gates['p99_seconds']:.2f} s "
                        f"(no worse + {slack:g} s)", fleet["p99_seconds"] <= gates["p99_seconds"] + slack))
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


def replicas(opts):
    """The fleet through `--replicas` daemons: alone, and as asked, sharing
    a store, the store killed, restarted empty or failed over to a replica
    whose clock is behind, a replica killed, the replicas restarted one at a
    time, the policy reloaded."""
    n = opts.replicas
    mixed = list(opts.languages) != ["rust"]
    fleet_of = f" ({'+'.join(opts.languages)})" if mixed else ""
    header(opts, f"{fleet_of}, {n} daemons behind one Service")
    ways = [(f"{n} daemons alone", Fleet(n), ["--replicas", str(n)])]
    if opts.pace_store:
        ways.append((f"{n} daemons sharing Redis", Fleet(n, store=True), ["--replicas", str(n), "--pace-store"]))
        if mixed:
            ways.append(("  the same, all Rust", Fleet(n, store=True), None))
    if opts.kill_store_at is not None:
        ways.append((f"  Redis killed at {opts.kill_store_at:g} s",
                     Fleet(n, store=True, kill_store_at=opts.kill_store_at),
                     ["--replicas", str(n), "--pace-store", "--store-lost-at", f"{opts.kill_store_at:g}s"]))
    if opts.kill_replica_at is not None:
        ways.append((f"  a daemon killed at {opts.kill_replica_at:g} s",
                     Fleet(n, store=opts.pace_store, kill_replica_at=opts.kill_replica_at), None))
    store = ["--replicas", str(n), "--pace-store"]
    if opts.restart_replicas_at is not None:
        ways.append((f"  rolling restart from {opts.restart_replicas_at:g} s",
                     Fleet(n, store=True, restart_replicas_at=opts.restart_replicas_at),
                     [*store, "--replicas-restart-at", f"{opts.restart_replicas_at:g}s"]))
    if opts.restart_store_at is not None:
        ways.append((f"  Redis restarted empty at {opts.restart_store_at:g} s",
                     Fleet(n, store=True, restart_store_at=opts.restart_store_at),
                     [*store, "--store-restarted-at", f"{opts.restart_store_at:g}s"]))
    if opts.fail_store_over_at is not None:
        at, behind = opts.fail_store_over_at, opts.store_clock_behind
        ways.append((f"  Redis failed over at {at:g} s, -{behind:g} s",
                     Fleet(n, store=True, fail_store_over_at=at, store_clock_behind=behind),
                     [*store, "--store-failed-over-at", f"{at:g}s", "--store-clock-behind", f"{behind:g}s"]))
    if opts.reload_at is not None:
        ways.append((f"  policy reloaded at {opts.reload_at:g} s", Fleet(n, store=True, reload_at=opts.reload_at),
                     store))
    report, means, targets = {}, {}, []
    for label, fleet, sim_flags in ways:
        languages = ("rust",) if label.endswith("all Rust") else opts.languages
        reals = [real_run("herd-gated", [], opts.processes, opts.callers, fleet, languages,
                          dependency=opts.dependency)
                 for _ in range(opts.runs)]
        sim = (simulated("herd-gated", ["--fleet", *sim_flags], opts.processes, opts.callers, opts.dependency)
               if sim_flags else None)
        report[label] = {"real": reals, "simulated": sim}
        means[label] = real = mean_of(reals)
        row(label, real, sim)
        if fleet.store and sim and fleet.kill_store_at is None:
            targets.append((f"{label}: real waste / simulated {real['wasted'] / max(sim['wasted'], 1):.2f} "
                            f"(at most 1.3)", real["wasted"] <= 1.3 * max(sim["wasted"], 1)))
            gap = real["p99_seconds"] - sim["p99_seconds"]
            targets.append((f"{label}: real p99 - simulated {gap:+.2f} s (within 0.5 s)", abs(gap) <= 0.5))
        if label.endswith("all Rust"):
            shared = means[ways[1][0]]["wasted"]
            targets.append((f"{ways[1][0]}: waste {shared:,.0f}, all Rust {real['wasted']:,.0f} (within 1.1x)",
                            shared <= 1.1 * real["wasted"]))
        if fleet.kill_store_at is not None:
            alone = means[ways[0][0]]["p99_seconds"]
            targets.append((f"{label}: p99 {real['p99_seconds']:.2f} s, alone {alone:.2f} s (no worse)",
                            real["p99_seconds"] <= alone))
        if fleet.kill_replica_at is not None:
            targets.append((f"{label}: callers who gave up {real['gave_up']:.0f} (none)", real["gave_up"] == 0))
        disturbed = (fleet.restart_replicas_at, fleet.restart_store_at, fleet.reload_at, fleet.fail_store_over_at)
        if any(at is not None for at in disturbed) and opts.pace_store:
            steady = means[f"{n} daemons sharing Redis"]
            store_lost = fleet.restart_store_at is not None or fleet.fail_store_over_at is not None
            slack = 1.0 if store_lost else 0.3
            targets.append((f"{label}: p99 {real['p99_seconds']:.2f} s, undisturbed "
                            f"{steady['p99_seconds']:.2f} s (within {slack:g} s)",
                            real["p99_seconds"] <= steady["p99_seconds"] + slack))
        if fleet.fail_store_over_at is not None:
            # Nothing paced faster: a lease or an overload kept past its
            # time on the slower clock must not let more through.
            targets.append((f"{label}: waste {real['wasted']:,.0f}, undisturbed {steady['wasted']:,.0f} "
                            f"(at most 1.3x)", real["wasted"] <= 1.3 * steady["wasted"]))
    print()
    for label, fleet, _ in ways:
        if fleet.measured_behind:
            print(f"{label}: the replica's Redis TIME read {statistics.mean(fleet.measured_behind):.3f} s "
                  f"behind the primary's (libfaketime at -{fleet.store_clock_behind:g} s; "
                  f"{len(fleet.measured_behind)} run(s))")
    for label, entry in report.items():
        costs = [r["redis"] for r in entry["real"] if r["redis"]]
        if costs and "killed" not in label:
            print(f"{label}: Redis ran {statistics.mean(c['scripts_per_second'] for c in costs):.1f} scripts/s "
                  f"({statistics.mean(c['commands_per_second'] for c in costs):.0f} commands/s inside them and "
                  f"besides) for one paced dependency")
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


def seconds_of(text):
    """A duration such as `300ms` or `1s`, in seconds."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    if text.endswith("s"):
        return float(text[:-1])
    raise ValueError(f"{text!r}: a duration takes ms or s, e.g. 300ms or 1s")


def delayed_link(opts):
    """The fleet through one daemon across a link delayed by each of
    `--link-delays` (the round trip between the processes and the daemon),
    beside the simulator's `--feedback-delay` of the same, and per-process
    gates (which pace alone, whatever the link) for reference."""
    header(opts, f", the daemon across a link of {', '.join(opts.link_delays)} round trip")
    report, targets = {}, []
    ways = [("per-process gates", 0.0, ["--no-fleet-pacing"], ["--no-fleet-pacing"])]
    ways += [(f"fleet, {delay} round trip", seconds_of(delay), [], ["--fleet", "--feedback-delay", delay])
             for delay in opts.link_delays]
    gates = None
    for label, delay, flags, sim_flags in ways:
        reals = [real_run("herd-gated", flags, opts.processes, opts.callers, Fleet(link_delay=delay),
                          opts.languages, dependency=opts.dependency)
                 for _ in range(opts.runs)]
        real = mean_of(reals)
        sim = simulated("herd-gated", sim_flags, opts.processes, opts.callers, opts.dependency)
        report[label] = {"real": reals, "simulated": sim}
        row(label, real, sim)
        gap = real["p99_seconds"] - sim["p99_seconds"]
        targets.append((f"{label}: real p99 - simulated {gap:+.2f} s (within 0.5 s)", abs(gap) <= 0.5))
        if gates is None:
            gates = real
        else:
            targets.append((f"{label}: real p99 {real['p99_seconds']:.2f} s, per-process gates "
                            f"{gates['p99_seconds']:.2f} s (no worse + 0.3 s)",
                            real["p99_seconds"] <= gates["p99_seconds"] + 0.3))
    print()
    met = all([verdict(what, ok) for what, ok in targets])
    return report, met


def brownout_of(text):
    """START,LASTING,CAPACITY (whole seconds, and requests a second) as three numbers."""
    try:
        start, lasting, capacity = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: START,LASTING,CAPACITY in whole numbers, e.g. 20,20,50")
    if min(start, lasting, capacity) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: none of START,LASTING,CAPACITY is below 0")
    return start, lasting, capacity


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1, help="real runs per way; the table gives their mean")
    parser.add_argument("--json", help="write every run, real and simulated, to this file")
    parser.add_argument("--languages", default="rust", type=lambda text: tuple(text.split(",")),
                        help="the clients the processes are dealt to in turn: rust, go, python (default rust)")
    parser.add_argument("--replicas", type=int, help="run the fleet through this many daemons behind one Service")
    parser.add_argument("--pace-store", action="store_true", help="with --replicas: also sharing a real Redis")
    parser.add_argument("--kill-store-at", type=float, metavar="SECONDS",
                        help="with --replicas: also a run with Redis killed this long after the callers start")
    parser.add_argument("--restart-replicas-at", type=float, metavar="SECONDS",
                        help="with --pace-store: restart the daemons one at a time, 5 s apart, from then")
    parser.add_argument("--restart-store-at", type=float, metavar="SECONDS",
                        help="with --pace-store: restart Redis empty then")
    parser.add_argument("--reload-at", type=float, metavar="SECONDS",
                        help="with --pace-store: change herd-gated's gate.quiet in the policy file then")
    parser.add_argument("--fail-store-over-at", type=float, metavar="SECONDS",
                        help="with --pace-store: fail Redis over then to a replica whose clock is behind")
    parser.add_argument("--store-clock-behind", type=float, default=5.0, metavar="SECONDS",
                        help="with --fail-store-over-at: how far the replica's clock is behind (default 5)")
    parser.add_argument("--kill-replica-at", type=float, metavar="SECONDS",
                        help="with --replicas: also a run with the first daemon killed this long after the start")
    parser.add_argument("--dependency", choices=sorted([*DEPENDENCIES, "postgres"]), default="own",
                        help="what the herd returns to: this project's loopback dependency (own), the same "
                             "with no limit once back (healthy), HAProxy's "
                             "stick-table rate limit in front of a stock web server (haproxy), or a real "
                             "PostgreSQL that crashes under a fleet of connection pools (postgres)")
    parser.add_argument("--connections", type=int, default=5,
                        help="with --dependency postgres: each process's pool size")
    parser.add_argument("--link-delays", type=lambda text: text.split(","), metavar="D,D,...",
                        help="instead of the three ways: the fleet through one daemon across a link of each "
                             "round trip (e.g. 100ms,300ms,1s), beside the simulator's --feedback-delay")
    parser.add_argument("--errors", type=float, metavar="SHARE",
                        help="instead of the herd: open-loop callers against a dependency failing SHARE at random")
    parser.add_argument("--brownout", type=brownout_of, metavar="START,LASTING,CAPACITY",
                        help="instead of the herd: open-loop callers through a brownout of the dependency to "
                             "CAPACITY a second from START for LASTING (whole seconds), the gate through the fleet")
    parser.add_argument("--rate", type=float,
                        help="with --errors or --brownout: calls a second, in all (300 with --errors, 100 with "
                             "--brownout)")
    parser.add_argument("--error-status", type=int, default=503,
                        help="with --errors: what the random failures are answered (503, which the gate's default "
                             "overloadOn hears as overload; 500, an error it counts as answered)")
    opts = parser.parse_args()
    if opts.errors is not None and not 0 < opts.errors < 1:
        parser.error(f"--errors takes a share between 0 and 1, not {opts.errors:g}")
    open_loop = opts.errors is not None or opts.brownout is not None
    if opts.errors is not None and opts.brownout is not None:
        parser.error("--errors and --brownout are two worlds: give one")
    if open_loop and opts.dependency != "own":
        parser.error("--errors and --brownout run against this project's dependency; not with --dependency")
    if open_loop and any(at is not None for at in (opts.kill_store_at, opts.kill_replica_at, opts.restart_store_at,
                                                   opts.reload_at, opts.fail_store_over_at)):
        parser.error("--errors and --brownout go with --replicas N [--pace-store [--restart-replicas-at S]] only")
    if opts.rate is None:
        opts.rate = 100.0 if opts.brownout is not None else 300.0
    if opts.rate <= 0:
        parser.error(f"--rate takes calls a second above 0, not {opts.rate:g}")
    if opts.brownout is not None:
        start, lasting, capacity = opts.brownout
        if lasting < 1 or start + lasting > ERRORS_SECONDS:
            parser.error(f"--brownout: it lasts a second or more and ends by {ERRORS_SECONDS} s, when calls stop")
        if capacity >= opts.rate:
            parser.error(f"--brownout: a CAPACITY below the rate ({opts.rate:g} a second), or nothing is refused")
    if opts.store_clock_behind < 0:
        parser.error(f"--store-clock-behind takes seconds, 0 or more, not {opts.store_clock_behind:g}")
    if not 400 <= opts.error_status <= 599:
        parser.error(f"--error-status takes an error status from 400 to 599, not {opts.error_status}")
    disturbances = (opts.restart_replicas_at, opts.restart_store_at, opts.reload_at, opts.fail_store_over_at)
    if opts.replicas is None and (opts.pace_store or opts.kill_store_at is not None
                                  or opts.kill_replica_at is not None or any(a is not None for a in disturbances)):
        parser.error("--pace-store, --kill-store-at, --kill-replica-at, --restart-replicas-at, --restart-store-at, "
                     "--fail-store-over-at and --reload-at go with --replicas N")
    if any(a is not None for a in disturbances) and not opts.pace_store:
        parser.error("--restart-replicas-at, --restart-store-at, --fail-store-over-at and --reload-at are measured "
                     "against replicas sharing Redis: give --pace-store")
    if opts.link_delays is not None:
        if opts.replicas is not None or open_loop or opts.dependency == "postgres":
            parser.error("--link-delays runs the herd through one daemon: not with --replicas, --errors, "
                         "--brownout or --dependency postgres")
        for delay in opts.link_delays:
            try:
                if seconds_of(delay) <= 0:
                    raise ValueError(f"{delay!r}: a round trip above 0")
            except ValueError as why:
                parser.error(f"--link-delays: {why}")
    if opts.replicas is not None and opts.replicas < 1:
        parser.error("--replicas takes 1 or more")
    unknown = [language for language in opts.languages if language not in HERDS]
    if unknown or not opts.languages:
        parser.error(f"--languages: {', '.join(unknown) or 'none given'}: each is one of {', '.join(HERDS)}")
    if opts.dependency == "postgres":
        unknown = [language for language in opts.languages if language not in PG_POOLS]
        if unknown or opts.replicas is not None:
            parser.error("--dependency postgres runs rust and python pools through one daemon")
    build(opts.languages)
    if opts.dependency == "postgres":
        report, met = postgres_world(opts)
    elif opts.errors is not None:
        report, met = errors_world(opts)
    elif opts.brownout is not None:
        report, met = brownout_world(opts)
    elif opts.link_delays is not None:
        report, met = delayed_link(opts)
    else:
        report, met = replicas(opts) if opts.replicas else one_daemon(opts)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
