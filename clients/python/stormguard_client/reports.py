"""Aggregating what calls did and sending it to the daemon, as the Rust
library's reporter does.

Counts are taken into a numbered batch (``{"instance", "sequence",
"reports"}``, POSTed to ``/v1/reports``), and that batch is sent until the
daemon answers it: sent again, byte for byte and under the same number,
after a network error, a timeout, a 5xx or a 429, so the daemon counts it
once. A 401 (the daemon requires a service-account token and refused the
one sent, or none was) is treated the same: nothing was counted, and the
next send reads the token file again. New counts aggregate meanwhile and go
in the next batch. A batch the daemon refuses (another 4xx) is dropped,
logged and counted, never resent.

While a dependency's send gate is on, the reporter also asks the daemon
for this process's share of the rate the whole fleet may send it, and the
gate paces at that share while the grant lasts (see
:mod:`stormguard_client.pace`). A gate that only watches (under
``overloadWhen: most-refused``) asks too, with what it heard, and turns on
when the grant says ``pace``. ``fleet_pacing=False`` leaves each gate to
what this process alone learns.

A dependency whose retry budget is fleet-scoped (``budget.scope: fleet``)
takes its part of the fleet's floor from the answers to reports
(:mod:`stormguard_client.floor`). Its first report goes a second after the
reporter starts, so that it learns its part early, then one every interval.

The daemon may be an ``https://`` one: ``tls`` (a
:class:`~stormguard_client.DaemonTls`) names the CA to trust and the client
certificate to present, and ``token_file`` the token to send with reports
and pace asks alike (see :mod:`stormguard_client.connect`).
"""

import contextlib
import dataclasses
import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import NoReturn

from .breaker import CircuitBreaker
from .budget import RetryBudget
from .connect import Connection, DaemonTls, Path, TokenFile
from .floor import FleetFloor
from .gate import SendGate
from .pace import ASK_EVERY, ASK_TIMEOUT, PaceGrant, ask_body

OUTCOMES = ("success", "error", "server_error")
MAX_INSTANCE_LEN = 253
MAX_ENDPOINT_LEN = 256
MAX_SERVICE_LEN = 63
OTHER = "other"
_WARNED_LIMIT = 1000
# How soon the first report goes by default while a fleet-scoped budget waits for its part.
FIRST_REPORT = 1.0

log = logging.getLogger(__name__)


def check_service_name(name: object) -> str | None:
    """Why the daemon would refuse ``name`` as a service (a DNS-1123 label),
    or None if it would not."""
    if not isinstance(name, str):
        return f"service name {name!r} is not a string"
    if not name:
        problem = "is empty"
    elif len(name.encode()) > MAX_SERVICE_LEN:
        problem = f"is longer than {MAX_SERVICE_LEN} characters"
    elif not all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in name):
        problem = "may contain only lowercase letters, digits and '-'"
    elif name.startswith("-") or name.endswith("-"):
        problem = "must start and end with a letter or digit"
    else:
        return None
    return f"service name {name!r} {problem} (service names are DNS-1123 labels, like Kubernetes Service names)"


def check_instance(instance: object) -> str | None:
    """Why the daemon would refuse ``instance`` (1 to 253 characters), or None."""
    if not isinstance(instance, str) or not 1 <= len(instance) <= MAX_INSTANCE_LEN:
        length = len(instance) if isinstance(instance, str) else instance
        return f"must be 1 to {MAX_INSTANCE_LEN} characters (the pod name), found {length!r}"
    return None


def check_endpoint(endpoint: object) -> str | None:
    """Why the daemon would refuse ``endpoint`` (1 to 256 characters), or None."""
    if not isinstance(endpoint, str) or not 1 <= len(endpoint) <= MAX_ENDPOINT_LEN:
        return f"must be 1 to {MAX_ENDPOINT_LEN} characters"
    return None


class ReportNotDelivered(Exception):
    """The daemon could not be reached, answered 5xx or 429, refused the
    token (401), or took too long: the batch is kept and sent again, under
    the same sequence number. ``status`` is the daemon's answer, or None
    when there was none."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ReportRefused(Exception):
    """The daemon refused a batch whole (a 4xx but 429): it was dropped."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"the stormguard daemon refused the report ({status}): {body}")
        self.status = status
        self.body = body


@dataclasses.dataclass
class ReporterStats:
    """What the reporter has sent, for a service's own metrics or logs."""

    batches_sent: int = 0
    """Batches the daemon counted (or had counted already)."""
    batches_dropped: int = 0
    """Batches the daemon refused whole (4xx): dropped, not resent."""
    reports_rejected: int = 0
    """Reports within counted batches that the daemon refused."""
    send_failures: int = 0
    """Sends that failed and will be tried again (daemon unreachable, 5xx, 429, 401, timeout)."""
    pace_asks: int = 0
    """Asks for a paced dependency's share (made while its send gate is on,
    or off and watching a dependency that lately accepted something)."""
    pace_failures: int = 0
    """Of those, the ones that got no grant (the gate paced alone meanwhile)."""


class _Service:
    """One dependency: counts per endpoint, what to report its states from
    (and its gate to pace), calls in flight."""

    def __init__(self) -> None:
        # endpoint -> ([success, error, server_error], {retry: count})
        self.endpoints: dict[str, tuple[list[int], dict[int, int]]] = {}
        self.in_flight = 0
        self.breaker: CircuitBreaker | None = None
        self.budget: RetryBudget | None = None
        self.gate: SendGate | None = None
        # The clock the gate keeps time by: its nanoseconds are the calls'.
        self.clock = time.monotonic_ns
        self.denied_taken = 0
        # a replaced budget's denials not yet taken
        self.denied_pending = 0
        # a fleet-scoped budget's floor
        self.floor: FleetFloor | None = None


class Reporter:
    """Aggregates attempts and sends them to the daemon every ``interval``
    seconds (once :meth:`start` ed); safe to share between threads.

    Once started, and unless ``fleet_pacing`` is False, it also asks the
    daemon, from a thread of its own, for the share of each tracked
    dependency whose send gate is on (or watching: see
    :meth:`~stormguard_client.gate.SendGate.asks_fleet_at`), and leases the
    grant to the gate, turning a watching gate on first when the grant says
    ``pace``. The same ask reports a tracked fleet-scoped breaker while it
    is open or has trials to report (see
    :meth:`~stormguard_client.breaker.CircuitBreaker.asks_fleet`), and the
    grant's word on the fleet's breaker goes to the breaker first.

    ``token_file`` is the service-account token file sent with each batch
    and pace ask as ``Authorization: Bearer``, for a daemon that checks who
    reports (in Kubernetes, a projected token volume with audience
    ``stormguard``); it is read at each send, so the kubelet's rotations
    are followed. None sends no token. ``tls`` (a
    :class:`~stormguard_client.DaemonTls`, or None) is the CA and client
    certificate towards an ``https://`` daemon; a TLS file that cannot be
    used raises ValueError (a TlsFileError) naming it. ``first_report`` is
    how soon, in seconds, the first report goes while a fleet-scoped budget
    waits for its part of the fleet's floor (at most ``interval``)."""

    def __init__(self, daemon: str, instance: str, caller: str | None = None, interval: float = 10.0,
                 timeout: float = 10.0, max_endpoints: int = 100, max_services: int = 100,
                 token_file: Path | None = None, tls: DaemonTls | None = None, fleet_pacing: bool = True,
                 first_report: float = FIRST_REPORT) -> None:
        parsed = urllib.parse.urlsplit(daemon) if isinstance(daemon, str) else None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"daemon: {daemon!r} is not an http(s) URL")
        problem = check_instance(instance)
        if problem:
            raise ValueError(f"instance: {instance!r} {problem}")
        if caller is not None:
            problem = check_service_name(caller)
            if problem:
                raise ValueError(f"caller: {problem}")
        for name, value in (("interval", interval), ("timeout", timeout), ("first_report", first_report)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be above 0 seconds, not {value!r}")
        for name, value in (("max_endpoints", max_endpoints), ("max_services", max_services)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number above 0, not {value!r}")
        if not isinstance(fleet_pacing, bool):
            raise ValueError(f"fleet_pacing must be True or False, not {fleet_pacing!r}")
        self._token = TokenFile(token_file)
        self._connection = Connection(tls)
        self.daemon = daemon.rstrip("/")
        self._pace_connection = self._connection.kept(self.daemon)
        self.instance = instance
        self.caller = caller
        self.interval = interval
        self.timeout = timeout
        self.max_endpoints = max_endpoints
        self.max_services = max_services
        self.fleet_pacing = fleet_pacing
        self.first_report = first_report
        self._services: dict[str, _Service] = {}
        # When the counts were last taken: what the next batch covers starts there.
        self._taken_at = time.monotonic()
        self._lock = threading.Lock()
        # Held for a whole send: sends go one at a time, and _pending is theirs.
        self._send_lock = threading.Lock()
        self._pending: tuple[int, bytes] | None = None
        # A random start: a restarted process under the same name does not
        # repeat the numbers of its previous run.
        self._next_sequence = random.SystemRandom().getrandbits(63)
        self._stats = ReporterStats()
        self._warned: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pacer: threading.Thread | None = None
        # Whether the daemon's last grant said it reads an ask's classes
        # (shed and demand): only then does an ask carry them, as a daemon
        # that predates them refuses an ask with fields it does not know.
        # An ask that gets no grant clears it. The pacing thread's alone.
        self._classes = False

    # --- counting -----------------------------------------------------------

    def record(self, service: str, endpoint: str, retry: int, outcome: str) -> None:
        """Counts one attempt at ``service``'s ``endpoint``; ``retry`` is 0 for
        a first try; ``outcome`` is "success" (an answer but a 5xx), "error"
        (no answer) or "server_error" (a 5xx). An endpoint past
        ``max_endpoints``, or named as the daemon would refuse, counts as "other"."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            raise ValueError(f"retry must be a whole number from 0 (the first try), not {retry!r}")
        with self._lock:
            counts = self._entry(service)
            if counts is None:
                return
            fits = endpoint in counts.endpoints or len(counts.endpoints) < self.max_endpoints
            key = endpoint if fits and check_endpoint(endpoint) is None else OTHER
            tally = counts.endpoints.setdefault(key, ([0, 0, 0], {}))
            tally[0][OUTCOMES.index(outcome)] += 1
            if retry > 0:
                tally[1][retry] = tally[1].get(retry, 0) + 1

    @contextlib.contextmanager
    def in_flight(self, service: str) -> Iterator[None]:
        """Counts a call to ``service`` in flight for the ``with`` block."""
        with self._lock:
            counts = self._entry(service)
            if counts is not None:
                counts.in_flight += 1
        try:
            yield
        finally:
            if counts is not None:
                with self._lock:
                    counts.in_flight -= 1

    def track(self, service: str, breaker: CircuitBreaker | None = None, budget: RetryBudget | None = None,
              gate: SendGate | None = None, clock: Callable[[], int] = time.monotonic_ns) -> None:
        """Reports ``service``'s breaker state, the retries its budget denied
        since the last report and whether its send gate is on, and paces the
        gate while it is, and asks for a fleet-scoped breaker while it is open
        or has trials to report (the latest breaker, budget and gate win). ``clock`` is the gate's
        and the breaker's clock (nanoseconds that never go back, the calls'
        own), so that the reporter reads them and hands them the daemon's
        word in their time."""
        with self._lock:
            counts = self._entry(service)
            if counts is None:
                return
            if budget is not counts.budget:
                # A new policy built a new budget: the old one's last denials
                # still go in the next report, and the new one's count from zero.
                if counts.budget is not None:
                    counts.denied_pending += max(counts.budget.denied - counts.denied_taken, 0)
                counts.floor = FleetFloor.follow(counts.floor, budget)
                counts.denied_taken = 0
            counts.breaker, counts.budget = breaker, budget
            counts.gate, counts.clock = gate, clock

    def _entry(self, service: str) -> "_Service | None":
        counts = self._services.get(service)
        if counts is not None:
            return counts
        problem = check_service_name(service)
        if problem is None and len(self._services) >= self.max_services:
            problem = f"too many dependencies (max_services is {self.max_services})"
        if problem is not None:
            if service not in self._warned and len(self._warned) < _WARNED_LIMIT:
                self._warned.add(service)
                log.warning("stormguard reporter: not counting calls to %r: %s", service, problem)
            return None
        counts = self._services[service] = _Service()
        return counts

    # --- sending ------------------------------------------------------------

    @property
    def stats(self) -> ReporterStats:
        """What has been sent so far (a copy)."""
        with self._lock:
            return dataclasses.replace(self._stats)

    def start(self) -> "Reporter":
        """Starts sending every ``interval`` in a daemon thread, and with
        ``fleet_pacing`` asking for paced dependencies' shares in another;
        returns self."""
        if self._thread is not None:
            raise RuntimeError("this reporter was started already")
        self._thread = threading.Thread(target=self._loop, name="stormguard-reporter", daemon=True)
        self._thread.start()
        if self.fleet_pacing:
            self._pacer = threading.Thread(target=self._pace_loop, name="stormguard-pacer", daemon=True)
            self._pacer.start()
        return self

    def flush(self) -> None:
        """Sends the pending batch, if any, then the counts aggregated now,
        and waits for the answers. Raises ReportNotDelivered (the batch is
        kept and goes first next time) or ReportRefused (it was dropped)."""
        with self._send_lock:
            self._send()

    def stop(self) -> None:
        """Stops the periodic sends and the pace asks, then sends what is
        pending and what is aggregated now (a failure is logged). A send
        that was under way is not lost: its batch, if unanswered, is still
        pending and goes first. A lease already granted runs out on its own."""
        self._stop.set()
        try:
            self.flush()
        except (ReportNotDelivered, ReportRefused) as error:
            log.warning("stormguard reporter: the last report could not be sent: %s", error)
        if self._thread is not None:
            self._thread.join(timeout=self.timeout)
        if self._pacer is not None:
            self._pacer.join(timeout=ASK_TIMEOUT * 2)

    def _loop(self) -> None:
        # The first report goes early while a fleet-scoped budget waits for
        # its part, so that the process takes it within a second or so.
        early = min(self.interval, self.first_report)
        if self._stop.wait(early) or (not self._awaits_part() and self._stop.wait(self.interval - early)):
            return
        while True:
            with self._send_lock:
                # stop() sets the event before it takes the lock: once it has
                # flushed, nothing is sent from here.
                if self._stop.is_set():
                    return
                try:
                    self._send()
                except (ReportNotDelivered, ReportRefused) as error:
                    log.warning("stormguard reporter: %s; counts are kept for the next report", error)
                except Exception:  # noqa: BLE001 - the thread must live on
                    log.exception("stormguard reporter: a send failed unexpectedly")
            if self._stop.wait(self.interval):
                return

    def _awaits_part(self) -> bool:
        """Whether a fleet-scoped budget has not yet had its part."""
        with self._lock:
            return any(c.floor is not None and not c.floor.answered_once for c in self._services.values())

    def _answered(self, parts: object) -> None:
        """Hands each fleet-scoped budget the part of its floor the daemon gave."""
        if not isinstance(parts, dict):
            return
        with self._lock:
            for service, part in parts.items():
                counts = self._services.get(service)
                if counts is not None and counts.floor is not None and counts.budget is not None \
                        and isinstance(part, dict):
                    counts.floor.answered(part, counts.budget)

    def _unreachable(self) -> None:
        """Sets each fleet-scoped budget's fallback floor: a report was not delivered."""
        with self._lock:
            for counts in self._services.values():
                if counts.floor is not None and counts.budget is not None:
                    counts.floor.unreachable(counts.budget)

    def _send(self) -> None:
        """The pending batch, then (if there was one) the counts aggregated
        now; stops at the first batch not delivered. Holds the send lock."""
        resent = self._pending is not None
        for _ in range(2 if resent else 1):
            if self._pending is None:
                # Taken and stored before the send: whatever happens to the
                # send, the counts are in the pending batch.
                self._pending = self._take()
            if self._pending is None:
                return
            try:
                self._deliver(*self._pending)
            except ReportNotDelivered:
                with self._lock:
                    self._stats.send_failures += 1
                self._unreachable()
                raise
            except ReportRefused:
                self._pending = None
                with self._lock:
                    self._stats.batches_dropped += 1
                raise
            self._pending = None

    def _take(self) -> tuple[int, bytes] | None:
        """The counts aggregated now as a numbered batch (sequence, body), or
        None when no dependency has been counted."""
        with self._lock:
            if not self._services:
                return None
            now = time.monotonic()
            span_ms, self._taken_at = int((now - self._taken_at) * 1000), now
            reports: list[dict[str, object]] = []
            for name, counts in self._services.items():
                endpoints, counts.endpoints = counts.endpoints, {}
                report = {
                    "service": name,
                    "instance": self.instance,
                    "endpoints": [
                        {"endpoint": endpoint,
                         "requests": dict(zip(OUTCOMES, outcomes)),
                         "retries": {str(retry): n for retry, n in sorted(retries.items())}}
                        for endpoint, (outcomes, retries) in endpoints.items()
                    ],
                    "inFlight": max(counts.in_flight, 0),
                }
                if self.caller is not None:
                    report["caller"] = self.caller
                if counts.breaker is not None:
                    report["circuitState"] = str(counts.breaker.state)
                if counts.gate is not None:
                    report["gateOn"] = counts.gate.is_on_at(counts.clock())
                if counts.floor is not None:
                    report["spanMs"] = span_ms
                if counts.budget is not None or counts.denied_pending:
                    since, counts.denied_pending = counts.denied_pending, 0
                    if counts.budget is not None:
                        denied = counts.budget.denied
                        since += max(denied - counts.denied_taken, 0)
                        counts.denied_taken = denied
                    report["budget"] = {"retriesDenied": since}
                reports.append(report)
            sequence = self._next_sequence
            self._next_sequence += 1
        batch = {"instance": self.instance, "sequence": sequence, "reports": reports}
        return sequence, json.dumps(batch, separators=(",", ":")).encode()

    def _deliver(self, sequence: int, body: bytes) -> None:
        """One POST of a batch; returns once the daemon counted it (now or before)."""
        request = urllib.request.Request(f"{self.daemon}/v1/reports", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        self._token.authorize(request)
        try:
            with self._connection.open(request, timeout=self.timeout) as answer:
                status = answer.status
                text = _read(answer)
        except urllib.error.HTTPError as error:
            with error:
                status = error.code
                text = _read(error)
        except (OSError, http.client.HTTPException) as error:
            raise ReportNotDelivered(f"the stormguard daemon did not take the report: {error!r}") from error
        if status >= 500 or status == 429:
            raise ReportNotDelivered(f"the stormguard daemon did not take the report: it answered {status}", status)
        if status == 401:
            # Nothing was counted, and the next send reads the token file again.
            said = text.decode(errors="replace")
            log.error("stormguard reporter: the daemon refused the service-account token (401): %s; "
                      "the batch is kept", said)
            raise ReportNotDelivered(
                f"the stormguard daemon did not take the report: it refused the token (401): {said}", status)
        if not 200 <= status < 300:
            said = text.decode(errors="replace")
            log.error("stormguard reporter: the daemon refused report batch %d (%d): %s; it is dropped",
                      sequence, status, said)
            raise ReportRefused(status, said)
        try:
            reply = json.loads(text, parse_constant=_not_json)
            rejected = reply.get("rejected") or []
            self._answered(reply.get("fleetBudgets"))
        except (ValueError, AttributeError):
            rejected = []
        for each in rejected:
            log.error("stormguard reporter: the daemon refused a report: %s", each)
        with self._lock:
            self._stats.batches_sent += 1
            self._stats.reports_rejected += len(rejected) if isinstance(rejected, list) else 0

    # --- fleet pacing -------------------------------------------------------

    def _pace_loop(self) -> None:
        """Asks for every tracked dependency whose gate is on or watching, or
        whose fleet-scoped breaker is open, every
        ``askEveryMs`` from the start of one round of asks to the next, or
        as soon as a round that took longer is done."""
        every = ASK_EVERY
        began = time.monotonic()
        try:
            while not self._stop.wait(max(began + every - time.monotonic(), 0.0)):
                began = time.monotonic()
                try:
                    for service, gate, breaker, clock in self._paced():
                        if self._stop.is_set():
                            return
                        grant = self._ask(service, gate, breaker, clock)
                        if grant is not None:
                            every = grant.ask_every
                except Exception:  # noqa: BLE001 - the thread must live on
                    log.exception("stormguard reporter: a pace ask failed unexpectedly")
        finally:
            self._pace_connection.close()

    def _paced(self) -> list[tuple[str, SendGate | None, CircuitBreaker | None, Callable[[], int]]]:
        """The tracked dependencies that ask the daemon now: their gate is on
        or watching (see :meth:`~stormguard_client.gate.SendGate.asks_fleet_at`),
        or their fleet-scoped breaker has something to say (see
        :meth:`~stormguard_client.breaker.CircuitBreaker.asks_fleet`):
        (service, gate, breaker, clock)."""
        with self._lock:
            tracked = [(name, counts.gate, counts.breaker, counts.clock) for name, counts in self._services.items()
                       if counts.gate is not None or counts.breaker is not None]
        return [(name, gate, breaker, clock) for name, gate, breaker, clock in tracked
                if (gate is not None and gate.asks_fleet_at(clock())) or (breaker is not None and breaker.asks_fleet())]

    def _ask(self, service: str, gate: SendGate | None, breaker: CircuitBreaker | None,
             clock: Callable[[], int]) -> PaceGrant | None:
        """One ask for ``service`` with what ``gate`` saw since the last and
        what a fleet-scoped ``breaker`` has to say, with the calls' classes
        if the daemon's last grant said it reads them; hands the grant over
        (see :meth:`_heard`) and returns it, or None when there was none
        (the next ask then carries no classes: it may have been refused by
        a replica that predates them, mid-rollout). If neither has anything
        to say any more (the gate turned off or the breaker closed since the
        round began), it asks nothing and returns None, as the Rust client
        does."""
        now = clock()
        tally = gate.tally() if gate is not None and gate.asks_fleet_at(now) else None
        report = breaker.fleet_report(now) if breaker is not None and breaker.asks_fleet() else None
        if tally is None and report is None:
            return None
        body = ask_body(service, self.instance, tally, report, classes=self._classes)
        headers = {"Content-Type": "application/json"}
        token = self._token.token()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        grant: PaceGrant | None = None
        try:
            status, answer = self._pace_connection.post("/v1/pace", body, headers, ASK_TIMEOUT)
            if 200 <= status < 300:
                grant = PaceGrant.from_json(answer)
            else:
                log.debug("stormguard reporter: the daemon gave no pace for %s (%d); the gate paces alone",
                          service, status)
        except (OSError, http.client.HTTPException) as error:
            log.debug("stormguard reporter: the daemon could not be asked for a pace for %s (%r); "
                      "the gate paces alone", service, error)
        except ValueError as error:
            log.debug("stormguard reporter: the daemon's pace for %s cannot be read (%s); the gate paces alone",
                      service, error)
        self._classes = grant is not None and grant.classes
        with self._lock:
            self._stats.pace_asks += 1
            self._stats.pace_failures += int(grant is None)
        if grant is not None:
            _heard(grant, gate, breaker, clock())
        return grant


def _heard(grant: PaceGrant, gate: SendGate | None, breaker: CircuitBreaker | None, now: int) -> None:
    """Hands ``grant`` over at ``now``: the fleet breaker's word to the
    breaker, then the lease to the gate, turning the gate on first if the
    grant says ``pace`` (a breaker the fleet closed hands the dependency to
    the daemon's pace; a watching gate turns on)."""
    until = now + grant.lease_ns
    closed = breaker is not None and grant.breaker is not None and breaker.heard(grant.breaker, until, now)
    if gate is None:
        return
    if grant.pace:
        if closed:
            gate.resume_by_fleet_at(now)
        else:
            gate.pace_by_fleet_at(now)
    gate.lease(grant.rate, until, now)


def _not_json(constant: str) -> NoReturn:
    """``NaN`` and ``Infinity`` are not JSON: an answer holding one is not read."""
    raise ValueError(f"{constant} is not JSON")


def _read(answer: http.client.HTTPResponse | urllib.error.HTTPError) -> bytes:
    """The body of an answer, or what of it came before the connection failed."""
    try:
        return answer.read()
    except (OSError, http.client.HTTPException):
        return b""
