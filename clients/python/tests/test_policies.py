"""The Python policy watch against the real daemon (and, for answers the
daemon never gives, a stand-in server)."""

import http.server
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import pytest

from stormguard_client import PolicyWatch
from stormguard_client.policies import DEFAULT_POLICY

ROOT = pathlib.Path(__file__).resolve().parents[3]
BINARY = pathlib.Path(os.environ.get("STORMGUARD_BINARY", ROOT / "target" / "debug" / "stormguard"))
POLICY = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: {retries}\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def daemon(tmp_path):
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: build it with cargo build (or set STORMGUARD_BINARY)")
    started = []

    def start(port=None, retries=2):
        port = port or free_port()
        policy = tmp_path / "policy.yaml"
        if not policy.exists():
            policy.write_text(POLICY.format(retries=retries))
        process = subprocess.Popen(
            [str(BINARY), "serve", "--policy", str(policy), "--listen", f"127.0.0.1:{port}", "--shutdown-delay", "2s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                return url, policy, process
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the daemon did not start")

    yield start
    for process in started:
        process.kill()
        process.wait()


def eventually(check, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_it_fetches_at_start_and_follows_an_edit_through_the_long_poll(daemon, tmp_path):
    url, policy, _ = daemon(retries=2)
    watch = PolicyWatch(url, ["payments", "search"], cache=tmp_path / "cache.json", watch_wait=5)
    assert watch.start() == "daemon"
    assert watch.policy("payments")["maxRetries"] == 2
    assert watch.policy("search")["maxRetries"] == 3, "not in the file: the file's defaults"
    policy.write_text(POLICY.format(retries=7))
    assert eventually(lambda: watch.policy("payments")["maxRetries"] == 7), "the edit arrives by the watch"
    watch.stop()


def test_with_the_daemon_down_it_starts_on_its_cache_or_the_defaults_and_catches_up(daemon, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    bare = PolicyWatch(url, ["payments"], startup_wait=0.3)
    assert bare.start() == "defaults"
    assert bare.policy("payments") == DEFAULT_POLICY
    bare.stop()

    cache = tmp_path / "cache.json"
    first, _, process = daemon(port=port, retries=5)
    cached = PolicyWatch(first, ["payments"], cache=cache)
    cached.start()
    cached.stop()
    process.kill()
    process.wait()
    restarted = PolicyWatch(url, ["payments"], cache=cache, startup_wait=0.3, min_poll_interval=0.1, retry_max=0.2)
    assert restarted.start() == "cache"
    assert restarted.policy("payments")["maxRetries"] == 5
    daemon(port=port)
    assert eventually(lambda: restarted.source == "daemon"), "it keeps trying, and catches up"
    restarted.stop()


class StandIn(http.server.BaseHTTPRequestHandler):
    """Answers well once, then with something no daemon sends."""

    answers = []

    def do_GET(self):
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("ETag", '"%d"' % len(self.answers))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_answer_it_cannot_read_changes_nothing():
    good = {"services": {"payments": {"etag": '"1"', "source": "override", "overridden": [], "policy": dict(DEFAULT_POLICY, maxRetries=9)}}}
    StandIn.answers = [(200, json.dumps(good).encode()), (200, b'{"services": {"payments": "oops"}}')]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        watch = PolicyWatch(f"http://127.0.0.1:{server.server_port}", ["payments"], min_poll_interval=0.05, retry_max=0.1)
        assert watch.start() == "daemon"
        time.sleep(0.5)
        assert watch.policy("payments")["maxRetries"] == 9, "the last good policy stays"
        watch.stop()
    finally:
        server.shutdown()


def test_a_draining_daemon_leaves_the_policies_as_they_are(daemon):
    url, _, process = daemon(retries=4)
    watch = PolicyWatch(url, ["payments"], watch_wait=5, min_poll_interval=0.05)
    watch.start()
    process.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert watch.policy("payments")["maxRetries"] == 4
    watch.stop()


def test_bad_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="services"):
        PolicyWatch("http://127.0.0.1:1", [])
    with pytest.raises(ValueError, match="daemon"):
        PolicyWatch("ftp://x", ["a"])
    with pytest.raises(ValueError, match="watch_wait"):
        PolicyWatch("http://127.0.0.1:1", ["a"], watch_wait=0)


def test_the_defaults_are_cores():
    vectors = ROOT / "clients" / "vectors" / "default-policy.json"
    assert json.loads(vectors.read_text()) == DEFAULT_POLICY


def test_a_lost_response_is_asked_again_and_the_policies_stay():
    """A stand-in that answers well once, then closes connections unanswered,
    then answers again: the client keeps its policy and catches the new one."""
    good = {"services": {"payments": {"etag": '"1"', "source": "override", "overridden": [], "policy": dict(DEFAULT_POLICY, maxRetries=9)}}}
    newer = {"services": {"payments": {"etag": '"2"', "source": "override", "overridden": [], "policy": dict(DEFAULT_POLICY, maxRetries=4)}}}
    plan = [("answer", good), ("drop", None), ("drop", None), ("answer", newer)]

    class Dropping(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            what, body = plan.pop(0) if len(plan) > 1 else plan[0]
            if what == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(200)
            self.send_header("ETag", body["services"]["payments"]["etag"])
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dropping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        watch = PolicyWatch(f"http://127.0.0.1:{server.server_port}", ["payments"], min_poll_interval=0.05, retry_max=0.1)
        assert watch.start() == "daemon"
        assert watch.policy("payments")["maxRetries"] == 9
        assert eventually(lambda: watch.policy("payments")["maxRetries"] == 4), "asked again after the lost answers"
        watch.stop()
    finally:
        server.shutdown()
