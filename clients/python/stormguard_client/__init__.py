"""stormguard's client for Python services: the policy watch (fetch, cache,
defaults, long-poll) and the delay law, the same to the nanosecond as the
Rust library's (clients/vectors checks it)."""

from .backoff import Backoff
from .policies import PolicyWatch

__all__ = ["Backoff", "PolicyWatch"]
