"""Fetching and watching a service's dependencies' retry policies from the
stormguard daemon, as the Rust library does: the blocking flavour, which
watches in a thread. What it fetches, when, and what it keeps is decided in
:mod:`stormguard_client.watching` (start-up wait, cache, defaults,
long-poll, backoff, ``Retry-After``), which
:class:`~stormguard_client.aio.AsyncPolicyWatch` drives under asyncio.

The daemon may be an ``https://`` one: ``tls`` (a
:class:`~stormguard_client.DaemonTls`) names the CA its certificate must
chain to and the client certificate to present; its files are followed as
they rotate (see :mod:`stormguard_client.connect`).
"""

import functools
import threading

from .plans import Run
from .watching import DEFAULT_POLICY, MAX_WAIT_HEADER, SOURCES, BaseWatch, Fetch, Unusable, WatchPlan

__all__ = ["DEFAULT_POLICY", "MAX_WAIT_HEADER", "SOURCES", "PolicyWatch", "Unusable"]


class PolicyWatch(BaseWatch):
    """The current policy of each dependency, kept up to date in a thread.

    ``tls`` (a :class:`~stormguard_client.DaemonTls`, or None) is the CA and
    client certificate towards an ``https://`` daemon; a TLS file that
    cannot be used raises ValueError (a TlsFileError) naming it."""

    _thread: threading.Thread | None = None

    @functools.cached_property
    def _stop(self) -> threading.Event:
        """Set by :meth:`stop`; made at its first use, so that a stop before
        :meth:`start` holds."""
        return threading.Event()

    def start(self) -> str:
        """Fetches within ``startup_wait`` (else the cache, else the defaults),
        then watches in a daemon thread. Returns where the policies came from."""
        # A start-up pause is not cut short by stop(): an event nobody sets.
        self._drive(self.starting(), threading.Event())
        self._thread = threading.Thread(target=self._drive, args=(self.watching(), self._stop),
                                        name="stormguard-policy-watch", daemon=True)
        self._thread.start()
        return self.source

    def stop(self) -> None:
        """Stops watching; an answer on its way is dropped."""
        self._stop.set()

    def _drive(self, plan: WatchPlan, stop: threading.Event) -> None:
        """Drives ``plan``, blocking, until it is over or ``stop`` is set;
        what a fetch brings once ``stop`` is set is not handed to it."""
        run = Run(plan)
        while not run.done and not stop.is_set():
            step = run.step
            if isinstance(step, Fetch):
                answer = self.fetched(step)
            else:
                answer = None
                stop.wait(step.seconds)
            if stop.is_set():
                return
            run.answer(answer)
