"""stormguard's client for Python services: the delay law so far, the same,
to the nanosecond, as the Rust library's (clients/vectors checks it)."""

from .backoff import Backoff

__all__ = ["Backoff"]
