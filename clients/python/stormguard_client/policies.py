"""Fetching and watching a service's dependencies' retry policies from the
stormguard daemon, as the Rust library does:

- at start-up, wait at most ``startup_wait`` for the daemon; failing that,
  use the cached policies (``cache``), failing that the built-in defaults,
  and keep trying in the background;
- then watch with one long-poll for every dependency (``GET /v1/policies
  ?services=a,b&wait=``), never two requests less than ``min_poll_interval``
  apart, backing off with full jitter after a failure and honouring
  ``Retry-After``; a shorter maximum wait from the daemon is taken;
- an answer that cannot be read changes nothing: the last good policies stay.

The daemon may be an ``https://`` one: ``tls`` (a
:class:`~stormguard_client.DaemonTls`) names the CA its certificate must
chain to and the client certificate to present; its files are followed as
they rotate (see :mod:`stormguard_client.connect`).
"""

import json
import os
import pathlib
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from .backoff import Backoff
from .connect import Connection

DEFAULT_POLICY = json.loads((pathlib.Path(__file__).parent / "default_policy.json").read_text())
MAX_WAIT_HEADER = "Stormguard-Max-Wait-Ms"
SOURCES = ("daemon", "cache", "defaults")


class Unusable(Exception):
    """An answer from the daemon this client cannot use."""


class PolicyWatch:
    """The current policy of each dependency, kept up to date in a thread.

    ``tls`` (a :class:`~stormguard_client.DaemonTls`, or None) is the CA and
    client certificate towards an ``https://`` daemon; a TLS file that
    cannot be used raises ValueError (a TlsFileError) naming it."""

    def __init__(self, daemon, services, *, cache=None, startup_wait=5.0, watch_wait=60.0,
                 min_poll_interval=1.0, retry_initial=0.1, retry_max=30.0, seed=None, tls=None):
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
        self._lock = threading.Lock()
        self._policies = {s: DEFAULT_POLICY for s in self.services}
        self._etag = None
        self.source = "defaults"
        self._stop = threading.Event()
        self._thread = None

    # --- what a caller uses -------------------------------------------------

    def policy(self, service):
        """The current resolved policy of ``service`` (its JSON, as served)."""
        with self._lock:
            return self._policies[service]

    def start(self):
        """Fetches within ``startup_wait`` (else the cache, else the defaults),
        then watches in a daemon thread. Returns where the policies came from."""
        deadline = time.monotonic() + self.startup_wait
        failures = 0
        previous = 0
        while True:
            try:
                self._apply(*self._fetch(None, None, timeout=max(deadline - time.monotonic(), 0.01)))
                self.source = "daemon"
                break
            except (OSError, Unusable):
                delay = self._backoff.delay(failures, previous, self._random.getrandbits(64)) / 1e9
                failures, previous = failures + 1, int(delay * 1e9)
                if time.monotonic() + delay >= deadline:
                    self.source = "cache" if self._load_cache() else "defaults"
                    break
                time.sleep(delay)
        self._thread = threading.Thread(target=self._watch, name="stormguard-policy-watch", daemon=True)
        self._thread.start()
        return self.source

    def stop(self):
        """Stops watching; an answer on its way is dropped."""
        self._stop.set()

    # --- the daemon ---------------------------------------------------------

    def _fetch(self, etag, wait, timeout):
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
        try:
            services = json.loads(body)["services"]
            policies = {s: services[s]["policy"] for s in self.services}
        except (ValueError, KeyError, TypeError) as error:
            raise Unusable(f"the daemon's answer cannot be read: {error!r}") from error
        if not all(isinstance(p, dict) and "maxRetries" in p for p in policies.values()):
            raise Unusable("the daemon's answer holds something that is not a policy")
        return etag, policies

    def _max_wait(self, headers):
        value = headers.get(MAX_WAIT_HEADER)
        if value and value.isdigit() and 0 < int(value) / 1000 < self.watch_wait:
            self.watch_wait = int(value) / 1000

    def _apply(self, etag, policies):
        with self._lock:
            self._policies = policies
            self._etag = etag
        self._save_cache(etag, policies)

    def _watch(self):
        failures = 0
        previous = 0
        while not self._stop.is_set():
            started = time.monotonic()
            pause = 0.0
            try:
                # Until the daemon has answered once, ask without waiting: a
                # cached ETag it still serves would hold a long-poll open.
                wait = self.watch_wait if self.source == "daemon" else None
                answer = self._fetch(self._etag, wait, timeout=self.watch_wait + 10)
                if self._stop.is_set():
                    break
                if answer is not None:
                    self._apply(*answer)
                # A 304 on a cached ETag: the daemon vouches for the cache.
                self.source = "daemon"
                failures, previous = 0, 0
            except (OSError, Unusable) as error:
                retry_after = getattr(error, "headers", None) and error.headers.get("Retry-After")
                delay = self._backoff.delay(failures, previous, self._random.getrandbits(64)) / 1e9
                failures, previous = failures + 1, int(delay * 1e9)
                pause = max(delay, float(retry_after) if retry_after and retry_after.isdigit() else 0.0)
            floor = started + self.min_poll_interval - time.monotonic()
            self._stop.wait(max(pause, floor, 0.0))

    # --- the cache ----------------------------------------------------------

    def _save_cache(self, etag, policies):
        if not self.cache:
            return
        text = json.dumps({"etag": etag, "services": policies})
        partial = self.cache.with_suffix(self.cache.suffix + ".partial")
        partial.write_text(text)
        os.replace(partial, self.cache)

    def _load_cache(self):
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
