"""The README's Python adoption example, run as it is written there: its
lines, taken from README.md, inside a coroutine, against the real daemon
and a loopback dependency that answers 503 once."""

import asyncio
import re
import textwrap

from conftest import ROOT, metric, needs_httpx, requests_sample
from test_httpx import Loopback, answer

needs_httpx()

SECTION = "## Guard a call"


def example():
    """The one ``python`` block of the README's section on guarding a call."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(SECTION):]
    section = section[:section.find("\n## ", len(SECTION))]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"one Python example in {SECTION!r}, found {len(blocks)}"
    return blocks[0]


def busy_then_charged(handler, number):
    """The loopback payments: a 503 at first, then the charge."""
    if number == 1:
        answer(handler, 503, b"busy")
    else:
        answer(handler, 200, b"charged")


def test_the_example_is_short():
    assert len(example().strip().splitlines()) < 10


def test_the_example_guards_an_async_client_against_the_real_daemon(daemon):
    url, _, _ = daemon(policy="defaults:\n  maxRetries: 3\n  initialDelay: 1ms\n")
    source = "async def run(daemon_url, payments_url):\n" + textwrap.indent(example(), "    ") \
        + "    return reporter, response\n"
    scope = {}
    exec(compile(source, "README.md", "exec"), scope)
    with Loopback(busy_then_charged) as dependency:
        reporter, response = asyncio.run(scope["run"](url, dependency.url))
    assert (response.status_code, response.text) == (200, "charged")
    assert dependency.bodies == ['{"order":7}'] * 2, "the 503 was retried, its body sent again"
    reporter.stop()
    assert metric(url, requests_sample("/charge", "payments", "server_error")) == 1
    assert metric(url, requests_sample("/charge", "payments", "success")) == 1
