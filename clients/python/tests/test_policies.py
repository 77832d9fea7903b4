"""The Python policy watch: what the conformance scenarios
(test_conformance.py, against the real daemon) do not cover."""

import http.client
import json
import socket
import threading

import pytest

import flavours
from conftest import ROOT, eventually
from stormguard_client import PolicyWatch
from stormguard_client.policies import DEFAULT_POLICY
from stormguard_client.watching import Fetch, Unusable


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


class ScriptedDaemon:
    """A loopback 'daemon' answering each policy request with the next of
    its ``answers`` (the last one again once they run out), each an HTTP
    answer as raw bytes, written and then the connection closed: a
    truncated one, or one that is not HTTP, as a connection cut mid-answer
    or a middlebox would give."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.asked = 0
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            with connection:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    request += chunk
                answer = self.answers[min(self.asked, len(self.answers) - 1)]
                self.asked += 1
                connection.sendall(answer)

    def close(self):
        self._server.close()


def policies(retries):
    """A whole 200 answer serving payments at ``retries``."""
    body = json.dumps({"services": {"payments": {"policy": {**DEFAULT_POLICY, "maxRetries": retries}}}}).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b'ETag: "v%d"\r\nContent-Length: %d\r\n\r\n' % (retries, len(body)) + body)


def cut_short(retries):
    """The same answer, its body cut off half-way (the daemon went, or a
    proxy cut the connection): http.client raises IncompleteRead, which is
    no OSError."""
    whole = policies(retries)
    return whole[:len(whole) - 40]


NOT_HTTP = b"SSH-2.0-OpenSSH_9.6\r\n"
"""What a port that is not the daemon's may say: http.client raises BadStatusLine."""


@pytest.mark.parametrize("answer", [cut_short(7), NOT_HTTP], ids=["cut-short", "not-http"])
def test_an_answer_that_breaks_off_or_is_not_http_is_a_failed_fetch_not_an_exception(answer):
    daemon = ScriptedDaemon(answer)
    try:
        watch = PolicyWatch(daemon.url, ["payments"])
        fetched = watch.fetched(Fetch(None, None, 5))
        assert isinstance(fetched, Unusable) and "cannot be read" in str(fetched), fetched
        assert isinstance(fetched.__cause__, http.client.HTTPException), fetched.__cause__
    finally:
        daemon.close()


@pytest.mark.parametrize("flavour_name", flavours.NAMES)
def test_a_watch_lives_through_an_answer_cut_short_and_takes_the_next(flavour_name):
    """An answer cut mid-body (IncompleteRead, an http.client exception
    that is no OSError) once killed the watch's thread (or task): the
    policies then stayed as they were for good, with nothing logged."""
    daemon = ScriptedDaemon(policies(2), cut_short(7), NOT_HTTP, policies(7))
    flavour = flavours.make(flavour_name)
    try:
        watch = flavour.watch(daemon.url, ["payments"], watch_wait=5, min_poll_interval=0.05,
                              retry_initial=0.05, retry_max=0.2)
        # The watch goes on at once: it may already have taken the later answers.
        assert watch.start() == "daemon" and watch.policy("payments")["maxRetries"] in (2, 7)
        assert eventually(lambda: watch.policy("payments")["maxRetries"] == 7, within=5), \
            f"the watch stopped after {daemon.asked} answers"
        assert watch.source == "daemon"
        watch.stop()
    finally:
        flavour.close()
        daemon.close()


@pytest.mark.parametrize("flavour_name", flavours.NAMES)
def test_a_cache_that_cannot_be_written_is_logged_and_the_watch_goes_on(flavour_name, tmp_path, caplog):
    """As the Rust and Go watches do; it once raised out of start() (or,
    on a later answer, killed the watch's thread or task)."""
    daemon = ScriptedDaemon(policies(5), policies(6))
    flavour = flavours.make(flavour_name)
    try:
        cache = tmp_path / "no-such-directory" / "cache.json"
        watch = flavour.watch(daemon.url, ["payments"], cache=cache, watch_wait=5, min_poll_interval=0.05)
        # The watch goes on at once: it may already have taken the second answer.
        assert watch.start() == "daemon" and watch.policy("payments")["maxRetries"] in (5, 6)
        assert eventually(lambda: watch.policy("payments")["maxRetries"] == 6, within=5), "watching still"
        assert "cannot write the policy cache" in caplog.text and not cache.exists()
        watch.stop()
    finally:
        flavour.close()
        daemon.close()


def test_processes_sharing_a_cache_each_write_a_file_of_their_own(tmp_path):
    """A pre-forking server's workers share one cache path: one worker's
    staged file (here one that cannot be written over) is not another's."""
    daemon = ScriptedDaemon(policies(5))
    try:
        cache = tmp_path / "cache.json"
        (tmp_path / "cache.json.partial").mkdir()
        watch = PolicyWatch(daemon.url, ["payments"], cache=cache)
        assert watch.start() == "daemon"
        watch.stop()
        assert json.loads(cache.read_text())["services"]["payments"]["maxRetries"] == 5
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "cache.json.partial"], \
            "no staged file left behind"
    finally:
        daemon.close()
