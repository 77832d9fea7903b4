"""The package's modules import one another without a circle: every import
counts, one under ``if TYPE_CHECKING:`` or inside a function included, so
a circle cannot hide behind either. A circle makes the order the modules
load in matter, and leaves each module of it unreadable without the other."""

import ast
import pathlib
import textwrap

import stormguard_client

PACKAGE = "stormguard_client"
# The installed package's own files when the tests run against the wheel.
SOURCE = pathlib.Path(stormguard_client.__file__).resolve().parent


def modules():
    """Each module of the package by its name within it (``__init__`` for
    the package itself), with its source."""
    return {path.stem: path.read_text() for path in sorted(SOURCE.glob("*.py"))}


def imported(source, names):
    """The package's modules (of ``names``) that ``source`` imports, each
    with the line of its first import: wherever the import stands."""
    found = {}

    def add(name, line):
        found.setdefault(name, line)

    def package_names(line, imported_names):
        # ``from . import x``: the module x, or a name the package itself holds.
        for alias in imported_names:
            add(alias.name if alias.name in names else "__init__", line)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 or (node.level == 0 and module.split(".")[0] == PACKAGE):
                inner = module if node.level == 1 else module[len(PACKAGE) + 1:]
                if inner:
                    add(inner.split(".")[0], node.lineno)
                else:
                    package_names(node.lineno, node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE:
                    add(parts[1] if len(parts) > 1 else "__init__", node.lineno)
    return found


def graph():
    """Each module: the modules it imports, each with the line that does."""
    sources = modules()
    return {name: imported(source, set(sources)) for name, source in sources.items()}


def cycles(edges):
    """Every circle of ``edges``: for each module on one, the shortest path
    from it back to itself, each circle named once, from its first module
    in name order."""
    found = set()
    for start in sorted(edges):
        paths, seen = [[start]], set()
        while paths and not any(path[-1] == start and len(path) > 1 for path in paths):
            following = []
            for path in paths:
                for after in sorted(edges.get(path[-1], {})):
                    if after == start or after not in seen:
                        seen.add(after)
                        following.append(path + [after])
            paths = following
        for path in paths:
            if len(path) > 1 and path[-1] == start:
                circle = path[:-1]
                first = circle.index(min(circle))
                found.add(tuple(circle[first:] + circle[:first]))
                break
    return sorted(found)


def describe(circle, edges):
    """A circle as it reads in the source: each import, with its file and line."""
    hops = zip(circle, circle[1:] + circle[:1])
    return " -> ".join(f"{here}.py:{edges[here][there]} imports .{there}" for here, there in hops)


def test_every_kind_of_import_is_seen():
    source = textwrap.dedent("""\
        from typing import TYPE_CHECKING
        from .calls import Outcome
        from . import settings, Dependency
        import stormguard_client.gate
        from stormguard_client.budget import RetryBudget
        import httpx
        if TYPE_CHECKING:
            from .controls import Controls
        def transport():
            from .httpx import GuardedTransport
        """)
    names = {"calls", "settings", "gate", "budget", "controls", "httpx", "__init__"}
    assert imported(source, names) == {"calls": 2, "settings": 3, "__init__": 3, "gate": 4, "budget": 5,
                                       "controls": 8, "httpx": 10}


def test_a_circle_is_named():
    edges = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}, "e": {"e": 2}}
    assert cycles(edges) == [("a", "b", "c"), ("e",)]
    assert describe(("a", "b", "c"), edges) == "a.py:3 imports .b -> b.py:5 imports .c -> c.py:7 imports .a"


def test_the_modules_import_one_another_without_a_circle():
    edges = graph()
    assert "dependency" in edges["__init__"], "the graph holds the package's imports"
    circles = [describe(circle, edges) for circle in cycles(edges)]
    assert not circles, "modules of stormguard_client import one another in a circle:\n" + "\n".join(circles)
