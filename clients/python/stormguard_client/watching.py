"""Fetching and watching a service's dependencies' retry policies from the
stormguard daemon, as the Rust library does: what both flavours of the
watch (:class:`~stormguard_client.PolicyWatch`, blocking, and
:class:`~stormguard_client.aio.AsyncPolicyWatch`) share.

- at start-up, wait at most ``startup_wait`` for the daemon; failing that,
  use the cached policies (``cache``), failing that the built-in defaults,
  and keep trying in the background;
- then watch with one long-poll for every dependency (``GET /v1/policies
  ?services=a,b&wait=``), never two requests less than ``min_poll_interval``
  apart, backing off with full jitter after a failure and honouring
  ``Retry-After``; a shorter maximum wait from the daemon is taken;
- an answer that cannot be read changes nothing: the last good policies stay.

Those decisions are two plans (see :mod:`stormguard_client.plans`),
:meth:`BaseWatch.starting` and :meth:`BaseWatch.watching`, which yield
:class:`Fetch` (ask the daemon; answer with :meth:`BaseWatch.fetched`) and
:class:`Pause` steps. Each flavour drives them; both fetch with the same
blocking request, :meth:`BaseWatch.fetched`.

The daemon may be an ``https://`` one: ``tls`` (a
:class:`~stormguard_client.DaemonTls`) names the CA its certificate must
chain to and the client certificate to present; its files are followed as
they rotate (see :mod:`stormguard_client.connect`).
"""

import email.message
import http.client
import json
import logging
import os
import pathlib
import random
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from .backoff import Backoff
from .connect import Connection, DaemonTls

DEFAULT_POLICY: dict[str, Any] = json.loads((pathlib.Path(__file__).parent / "default_policy.json").read_text())
"""The built-in default policy (core's, ``clients/vectors/default-policy.json``)."""
MAX_WAIT_HEADER = "Stormguard-Max-Wait-Ms"
SOURCES = ("daemon", "cache", "defaults")
log = logging.getLogger(__name__)

Policy: TypeAlias = Mapping[str, object]
"""A resolved policy: its JSON, as the daemon serves it."""
Policies: TypeAlias = dict[str, Policy]
"""Each dependency's resolved policy, by name."""
Answer: TypeAlias = "tuple[str | None, Policies] | None"
"""A fetch's answer: (ETag, policies) of a 200, None of a 304."""


class Unusable(Exception):
    """An answer from the daemon this client cannot use."""


@dataclass(frozen=True)
class Fetch:
    """Ask the daemon for the policies, under ``etag`` (None: unconditionally),
    long-polling for ``wait`` seconds (None: answer at once), giving up
    after ``timeout`` seconds; answer with :meth:`BaseWatch.fetched`."""

    etag: str | None
    wait: float | None
    timeout: float


@dataclass(frozen=True)
class Pause:
    """Ask nothing for ``seconds``; answer None."""

    seconds: float


WatchStep: TypeAlias = Fetch | Pause
Fetched: TypeAlias = "Answer | OSError | Unusable"
"""What came of a fetch: its answer, or why there was none."""
WatchPlan: TypeAlias = Generator[WatchStep, "Fetched | None", None]


class BaseWatch:
    """The current policy of each dependency, and the decisions that keep
    it up to date; a flavour drives the plans.

    ``tls`` (a :class:`~stormguard_client.DaemonTls`, or None) is the CA and
    client certificate towards an ``https://`` daemon; a TLS file that
    cannot be used raises ValueError (a TlsFileError) naming it."""

    def __init__(self, daemon: str, services: Collection[str], *, cache: str | os.PathLike[str] | None = None,
                 startup_wait: float = 5.0, watch_wait: float = 60.0, min_poll_interval: float = 1.0,
                 retry_initial: float = 0.1, retry_max: float = 30.0, seed: int | None = None,
                 tls: DaemonTls | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if not services:
            raise ValueError("services: name at least one dependency")
        parsed = urllib.parse.urlsplit(daemon)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"daemon: {daemon!r} is not an http(s) URL")
        for name, value in (("startup_wait", startup_wait), ("watch_wait", watch_wait),
                            ("min_poll_interval", min_poll_interval), ("retry_max", retry_max)):
            if not value > 0:
                raise ValueError(f"{name} must be above 0, not {value}")
        self._connection = Connection(tls)
        self.daemon = daemon.rstrip("/")
        self.services = sorted(set(services))
        self.cache = pathlib.Path(cache) if cache else None
        self.startup_wait = startup_wait
        self.watch_wait = watch_wait
        self.min_poll_interval = min_poll_interval
        self._backoff = Backoff(int(retry_initial * 1e9), int(retry_max * 1e9), 2.0, "full")
        self._random = random.Random(seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._policies: Policies = {s: DEFAULT_POLICY for s in self.services}
        self._etag: str | None = None
        self.source = "defaults"
        """Where the policies came from: "daemon", "cache" or "defaults"."""

    def policy(self, service: str) -> Policy:
        """The current resolved policy of ``service`` (its JSON, as served)."""
        with self._lock:
            return self._policies[service]

    # --- the plans ----------------------------------------------------------

    def starting(self) -> WatchPlan:
        """Fetches within ``startup_wait``, else takes the cache, else the
        defaults; :attr:`source` says which."""
        deadline = self._clock() + self.startup_wait
        failures, previous = 0, 0
        while True:
            answer = yield Fetch(None, None, max(deadline - self._clock(), 0.01))
            if not isinstance(answer, Exception):
                if answer is not None:
                    self._apply(*answer)
                self.source = "daemon"
                return
            delay = self._backoff.delay(failures, previous, self._random.getrandbits(64)) / 1e9
            failures, previous = failures + 1, int(delay * 1e9)
            if self._clock() + delay >= deadline:
                self.source = "cache" if self._load_cache() else "defaults"
                return
            yield Pause(delay)

    def watching(self) -> WatchPlan:
        """Watches without end: a long-poll at a time, paced and backed off."""
        failures, previous = 0, 0
        while True:
            started = self._clock()
            pause = 0.0
            # Until the daemon has answered once, ask without waiting: a
            # cached ETag it still serves would hold a long-poll open.
            wait = self.watch_wait if self.source == "daemon" else None
            answer = yield Fetch(self._etag, wait, self.watch_wait + 10)
            if isinstance(answer, Exception):
                headers = getattr(answer, "headers", None)
                retry_after = headers.get("Retry-After") if headers else None
                delay = self._backoff.delay(failures, previous, self._random.getrandbits(64)) / 1e9
                failures, previous = failures + 1, int(delay * 1e9)
                pause = max(delay, float(retry_after) if retry_after and retry_after.isdigit() else 0.0)
            else:
                if answer is not None:
                    self._apply(*answer)
                # A 304 on a cached ETag: the daemon vouches for the cache.
                self.source = "daemon"
                failures, previous = 0, 0
            floor = started + self.min_poll_interval - self._clock()
            yield Pause(max(pause, floor, 0.0))

    # --- the daemon ---------------------------------------------------------

    def fetched(self, fetch: Fetch) -> Fetched:
        """Performs ``fetch``, blocking: its answer, or the OSError (the
        daemon cannot be reached, or answered an error) or Unusable (its
        answer cannot be read) that stands for none."""
        try:
            return self._fetch(fetch.etag, fetch.wait, fetch.timeout)
        except (OSError, Unusable) as error:
            return error

    def _fetch(self, etag: str | None, wait: float | None, timeout: float) -> Answer:
        """(etag, policies) of a 200; None on a 304. Raises OSError when the
        daemon cannot be reached or answers an error, Unusable when its
        answer cannot be read."""
        query = {"services": ",".join(self.services)}
        if wait is not None:
            query["wait"] = f"{int(wait * 1000)}ms"
        request = urllib.request.Request(f"{self.daemon}/v1/policies?{urllib.parse.urlencode(query)}")
        if etag:
            request.add_header("If-None-Match", etag)
        try:
            with self._connection.open(request, timeout=timeout) as answer:
                self._max_wait(answer.headers)
                body = answer.read()
                etag = answer.headers.get("ETag")
        except urllib.error.HTTPError as error:
            error.close()  # its headers stay readable
            if error.code == 304:
                self._max_wait(error.headers)
                return None
            raise
        except OSError:
            raise
        except http.client.HTTPException as error:
            # An answer cut off mid-way, or one that is not HTTP at all.
            raise Unusable(f"the daemon's answer cannot be read: {error!r}") from error
        try:
            services = json.loads(body)["services"]
            policies = {s: services[s]["policy"] for s in self.services}
        except (ValueError, KeyError, TypeError) as error:
            raise Unusable(f"the daemon's answer cannot be read: {error!r}") from error
        if not all(isinstance(p, dict) and "maxRetries" in p for p in policies.values()):
            raise Unusable("the daemon's answer holds something that is not a policy")
        return etag, policies

    def _max_wait(self, headers: email.message.Message) -> None:
        value = headers.get(MAX_WAIT_HEADER)
        if value and value.isdigit() and 0 < int(value) / 1000 < self.watch_wait:
            self.watch_wait = int(value) / 1000

    def _apply(self, etag: str | None, policies: Policies) -> None:
        with self._lock:
            self._policies = policies
            self._etag = etag
        self._save_cache(etag, policies)

    # --- the cache ----------------------------------------------------------

    def _save_cache(self, etag: str | None, policies: Policies) -> None:
        """Writes the cache through a staged file of this write's own (the
        processes of a pre-forking server share one cache path), so a reader
        never sees half of it; a cache that cannot be written is logged and
        the watch goes on."""
        if not self.cache:
            return
        text = json.dumps({"etag": etag, "services": policies})
        staged: str | None = None
        try:
            with tempfile.NamedTemporaryFile("w", dir=self.cache.parent, prefix=f".{self.cache.name}.",
                                             suffix=".partial", delete=False) as file:
                staged = file.name
                file.write(text)
            os.replace(staged, self.cache)
        except OSError as error:
            log.warning("cannot write the policy cache %s: %s", self.cache, error)
            if staged is not None:
                pathlib.Path(staged).unlink(missing_ok=True)

    def _load_cache(self) -> bool:
        if not self.cache or not self.cache.exists():
            return False
        try:
            cached = json.loads(self.cache.read_text())
            policies = {s: cached["services"][s] for s in self.services}
        except (ValueError, KeyError, TypeError, OSError):
            return False
        with self._lock:
            self._policies = policies
            self._etag = cached.get("etag")
        return True
