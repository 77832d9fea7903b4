"""The examples, run as the benchmark runs them, against the real daemon."""

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT

HERD = ROOT / "clients" / "python" / "examples" / "herd_callers.py"
POLICY = "defaults:\n  maxRetries: 3\nservices:\n  herd:\n    initialDelay: 1ms\n    gate:\n      enabled: true\n"


@pytest.fixture
def dependency():
    """``start(status)``: the URL of a dependency whose ``GET /call`` answers
    ``status``; the statuses it answered are in the list ``start`` returns
    beside it."""
    servers = []

    def start(status):
        answered = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                answered.append(status if self.path == "/call" else 404)
                self.send_response(answered[-1])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", answered

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def herd(daemon_url, dependency_url, *flags):
    """What one herd process of 5 callers printed, read."""
    start_at = int(time.time() * 1000) + 500
    done = subprocess.run(
        [sys.executable, str(HERD), "--daemon", daemon_url, "--service", "herd", "--instance", "pod-1",
         "--dependency", dependency_url, "--callers", "5", "--start-at", str(start_at), *flags],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_herd_prints_each_success_and_counts_its_attempts(daemon, dependency):
    url, _, _ = daemon(policy=POLICY)
    serving, answered = dependency(200)
    result = herd(url, serving)
    assert {k: v for k, v in result.items() if k != "seconds"} == \
        {"instance": "pod-1", "succeeded": 5, "gave_up": 0, "attempts": 5}
    assert len(result["seconds"]) == 5 and all(0.0 <= s < 30.0 for s in result["seconds"])
    assert answered == [200] * 5


def test_a_status_retry_on_leaves_out_gives_up_at_once(daemon, dependency):
    url, _, _ = daemon(policy=POLICY)
    refusing, answered = dependency(404)
    result = herd(url, refusing, "--no-fleet-pacing")
    assert (result["succeeded"], result["gave_up"], result["attempts"], result["seconds"]) == (0, 5, 5, [])
    assert answered == [404] * 5


def test_open_loop_calls_arrive_over_time_and_are_timed_from_their_arrival(daemon, dependency):
    url, _, _ = daemon(policy=POLICY)
    serving, answered = dependency(200)
    started = time.monotonic()
    result = herd(url, serving, "--rate", "40", "--seconds", "1.5", "--seed", "3")
    calls = result["succeeded"]
    assert 30 <= calls <= 95 and result["gave_up"] == 0, result
    assert result["attempts"] == calls and len(answered) == calls
    assert time.monotonic() - started >= 1.5, "the last call arrives late in the second and a half"
    # Timed from each call's arrival, not from the start: none waits long.
    assert all(0.0 <= s < 1.0 for s in result["seconds"]), result["seconds"]


def test_open_loop_needs_the_seconds_calls_arrive_for(daemon, dependency):
    url, _, _ = daemon(policy=POLICY)
    serving, _ = dependency(200)
    done = subprocess.run(
        [sys.executable, str(HERD), "--daemon", url, "--service", "herd", "--instance", "pod-1",
         "--dependency", serving, "--start-at", "0", "--rate", "5"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--seconds is required with --rate" in done.stderr, done.stderr
