"""The blocking and the asyncio flavour behind one face, so that a test
written once runs against both: ``flavour.watch(...)`` and
``flavour.dependency(...)`` take what PolicyWatch and Dependency take, and
hand back objects a test drives from its own thread as it drives the
blocking ones (``start``, ``stop``, ``policy``, ``call`` with a plain
``attempt(timeout)``). The asyncio flavour's run on an event loop in a
thread of its own, entered with ``async with`` as a service would."""

import asyncio
import threading

from stormguard_client import Dependency, PolicyWatch
from stormguard_client.aio import AsyncDependency, AsyncPolicyWatch

NAMES = ("sync", "async")


class Blocking:
    """The blocking flavour, as it is."""

    name = "sync"

    def watch(self, *args, **settings):
        return PolicyWatch(*args, **settings)

    def dependency(self, *args, **settings):
        return Dependency(*args, **settings)

    def close(self):
        pass


class Asyncio:
    """The asyncio flavour, on a loop in a thread of its own."""

    name = "async"

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="flavour-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine):
        """What ``coroutine`` returns, run on the loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def watch(self, *args, **settings):
        return _Watch(self, AsyncPolicyWatch(*args, **settings))

    def dependency(self, watch, *args, **settings):
        return _Dependency(self, AsyncDependency(watch, *args, **settings))

    def close(self):
        """Cancels what still runs on the loop, then closes it."""
        async def cancel_all():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _Watch:
    """An AsyncPolicyWatch, entered and left with ``async with`` on the loop."""

    def __init__(self, flavour, watch):
        self._flavour = flavour
        self.watch = watch

    def start(self):
        entered = self._flavour.run(self.watch.__aenter__())
        assert entered is self.watch
        return self.watch.source

    def stop(self):
        self._flavour.run(self.watch.__aexit__(None, None, None))

    def policy(self, service):
        return self.watch.policy(service)

    def __getattr__(self, name):
        return getattr(self.watch, name)


class _Dependency:
    """An AsyncDependency whose calls run on the loop, with a plain attempt
    made a coroutine."""

    def __init__(self, flavour, dependency):
        self._flavour = flavour
        self.dependency = dependency

    def call(self, endpoint, attempt, **options):
        async def attempted(timeout):
            return attempt(timeout)

        return self._flavour.run(self.dependency.call(endpoint, attempted, **options))

    def __getattr__(self, name):
        return getattr(self.dependency, name)


def make(name):
    """The flavour named ``name`` (one of NAMES); close it after the test."""
    return Blocking() if name == "sync" else Asyncio()
