"""Reading a policy block (``circuitBreaker``, ``gate``) from the JSON the
daemon serves: what every block type checks before its own keys."""

from collections.abc import Iterable, Mapping


def merged(name: str, block: object, defaults: Mapping[str, object] | None,
           keys: Iterable[str]) -> tuple[dict[str, object], bool]:
    """``block`` over ``defaults`` (another such block, if given), and its
    ``enabled``, once it is an object with every key of ``keys`` and a
    boolean ``enabled``. Raises ValueError naming the block ``name`` and
    what is wrong."""
    if not isinstance(block, dict):
        raise ValueError(f"{name} must be an object, not {block!r}")
    out = dict(defaults or {})
    out.update(block)
    for key in keys:
        if key not in out:
            raise ValueError(f"{name}.{key} is missing")
    enabled = out["enabled"]
    if not isinstance(enabled, bool):
        raise ValueError(f"{name}.enabled must be true or false, not {enabled!r}")
    return out, enabled
