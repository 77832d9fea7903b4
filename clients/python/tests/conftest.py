"""What the tests against the real daemon share: the daemon itself, free
ports, waiting for a condition, reading a metric, and a loopback fault proxy."""

import http.client
import http.server
import importlib
import json
import os
import pathlib
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BINARY = pathlib.Path(os.environ.get("STORMGUARD_BINARY", ROOT / "target" / "debug" / "stormguard"))
POLICY = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: {retries}\n"


def needs_httpx():
    """The httpx module, for the tests of the ``httpx`` extra: they are
    skipped where it is not installed, but fail under CI (``CI`` set),
    which installs it, rather than pass unseen."""
    if os.environ.get("CI"):
        return importlib.import_module("httpx")
    return pytest.importorskip("httpx", reason="the httpx extra is not installed: pip install 'clients/python[httpx]'")


class Reserved:
    """A loopback address this test holds: a socket bound to it and not
    listening, so that a client meets a refusal there (nobody is there) and
    no other process can take its port while it is held; never a port
    probed free and bound later, which another process could take between.

    A daemon started on it (``daemon(on=reserved)``) is handed the socket,
    as systemd's socket activation hands one (``LISTEN_FDS``), and listens
    on it; it keeps listening when that daemon exits, and connections then
    wait for the next daemon started on it."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.socket.close()


@pytest.fixture
def reserved():
    """Makes :class:`Reserved` addresses, closed when the test ends."""
    held = []

    def make():
        held.append(Reserved())
        return held[-1]

    yield make
    for address in held:
        address.close()


def eventually(check, within=10.0):
    """Whether ``check()`` comes true within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def metric(daemon_url, sample, context=None):
    """The value of the Prometheus sample named exactly ``sample`` (name and
    labels as the daemon prints them) at ``daemon_url``/metrics, or None;
    ``context`` is the SSL context for an https:// daemon."""
    with urllib.request.urlopen(f"{daemon_url}/metrics", timeout=5, context=context) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return None


def requests_sample(endpoint, service, status):
    """The ``http_client_requests_total`` sample of one endpoint and outcome."""
    return f'http_client_requests_total{{endpoint="{endpoint}",service="{service}",status="{status}"}}'


def serving_on(line):
    """The base URL in the daemon's start-up line (``serving on
    http://127.0.0.1:PORT``, or ``https://`` when it serves TLS), or None
    if ``line`` is another."""
    at = line.find("serving on http")
    if at < 0:
        return None
    return line[at + len("serving on "):].split()[0]


def _follow_log(process, log, urls):
    """Keeps the daemon's log (its stderr) in ``log`` and puts the URL of
    its start-up line in ``urls``; drained to the end, so it never blocks,
    and closed there."""
    with process.stderr:
        for line in process.stderr:
            log.append(line)
            url = serving_on(line)
            if url is not None:
                urls.put(url)
    urls.put(None)


@pytest.fixture
def daemon(tmp_path):
    """Starts ``stormguard serve`` (``--shutdown-delay 2s``) on a port of
    its choosing, or on a :class:`Reserved` address's socket:
    ``start(on=None, retries=2, policy=None, args=())`` returns (url,
    policy file, process), the URL as the daemon's start-up line gives it
    (``https://`` when ``args`` make it serve TLS). The policy file is
    written once per test (from ``policy``, else payments at ``retries``),
    so a restart serves the same."""
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: build it with cargo build (or set STORMGUARD_BINARY)")
    started, followers = [], []

    def start(on=None, retries=2, policy=None, args=()):
        path = tmp_path / "policy.yaml"
        if not path.exists():
            path.write_text(policy if policy is not None else POLICY.format(retries=retries))
        command = [str(BINARY), "serve", "--policy", str(path), "--listen",
                   f"127.0.0.1:{on.port if on else 0}", "--shutdown-delay", "2s", *args]
        env = {**os.environ, "RUST_LOG": "info"}
        env.pop("LISTEN_FDS", None)
        env.pop("LISTEN_PID", None)
        handed = ()
        if on is not None:
            # Socket activation hands sockets over from descriptor 3 on.
            fd = on.socket.fileno()
            handed, env["LISTEN_FDS"] = (fd,), "1"
            if fd != 3:
                move = f"import os, sys; os.dup2({fd}, 3); os.close({fd}); os.execv(sys.argv[1], sys.argv[1:])"
                command = [sys.executable, "-c", move, *command]
        process = subprocess.Popen(
            command, pass_fds=handed,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace", env=env)
        started.append(process)
        log, urls = [], queue.Queue()
        follower = threading.Thread(target=_follow_log, args=(process, log, urls), daemon=True)
        follower.start()
        followers.append(follower)
        try:
            url = urls.get(timeout=20)
        except queue.Empty:
            url = None
        if url is None:
            process.kill()
            process.wait()
            pytest.fail(f"the daemon did not start (exit status {process.returncode}); its log:\n{''.join(log)}")
        return url, path, process

    yield start
    for process in started:
        process.kill()
        process.wait()
    for follower in followers:
        follower.join(timeout=10)


class FaultProxy:
    """A loopback HTTP proxy in front of the daemon that forwards everything
    but what it is told to break:

    - ``corrupt_policies``: policy requests are answered 200 with a body that
      is not JSON (also the answer of one forwarded before it was set);
    - ``lose_policy_answers = N``: the next N policy answers are lost: the
      request went to the daemon, the connection is closed unanswered;
    - ``lose_report_batch = N``: the same for the Nth report batch (from 1);
    - ``grant_once = (rate, lease_ms)``: the first pace ask is answered by
      the proxy itself, not forwarded, with a grant of ``rate`` for
      ``lease_ms`` (``askEveryMs`` 100), and every later one 503;
    - ``floor_once = (service, per_second, processes)``: the first report
      batch is answered by the proxy itself, 202 with that part of
      ``service``'s fleet-scoped budget, and every later one 503.

    ``report_batches`` holds the body of every report batch, in order, and
    ``pace_asks`` of every pace ask; ``lost`` counts the answers lost and
    ``corrupted`` the bad answers sent."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.corrupt_policies = False
        self.lose_policy_answers = 0
        self.lose_report_batch = None
        self.grant_once = None
        self.floor_once = None
        self.report_batches = []
        self.pace_asks = []
        self._granted = False
        self.lost = 0
        self.corrupted = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                proxy._handle(self)

            def do_POST(self):
                proxy._handle(self)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_port}"

    def close(self):
        """Stops listening."""
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler):
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        policies = handler.path.startswith("/v1/policies")
        reports = handler.path.startswith("/v1/reports") and handler.command == "POST"
        if handler.path.startswith("/v1/pace") and handler.command == "POST":
            with self._lock:
                self.pace_asks.append(body)
                grant, granted = self.grant_once, self._granted
                self._granted = self._granted or grant is not None
            if grant is not None:
                return self._grant(handler, None if granted else grant)
        if policies and self.corrupt_policies:
            return self._corrupt(handler)
        number = None
        if reports:
            with self._lock:
                self.report_batches.append(body)
                number = len(self.report_batches)
            if self.floor_once is not None:
                return self._floor(handler, self.floor_once if number == 1 else None)
        status, headers, answer = self._forward(handler, body)
        with self._lock:
            lose = (policies and self.lose_policy_answers > 0) or (reports and number == self.lose_report_batch)
            if policies and lose:
                self.lose_policy_answers -= 1
            if lose:
                self.lost += 1
        if lose:
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return None
        if policies and self.corrupt_policies:
            return self._corrupt(handler)
        return _answer(handler, status, headers, answer)

    def _grant(self, handler, grant):
        """Answers a pace ask with ``grant`` (rate, lease_ms), or 503 if None."""
        if grant is None:
            return _answer(handler, 503, [("Content-Type", "application/json")], b'{"error":"unavailable"}')
        rate, lease_ms = grant
        grant = json.dumps({"rate": rate, "leaseMs": lease_ms, "askEveryMs": 100}).encode()
        return _answer(handler, 200, [("Content-Type", "application/json")], grant)

    def _floor(self, handler, floor):
        """Answers a report batch with ``floor`` (service, per_second, processes), or 503 if None."""
        if floor is None:
            return _answer(handler, 503, [("Content-Type", "application/json")], b'{"error":"unavailable"}')
        service, per_second, processes = floor
        part = {"minRetriesPerSecond": per_second, "processes": processes}
        answer = json.dumps({"accepted": 1, "fleetBudgets": {service: part}}).encode()
        return _answer(handler, 202, [("Content-Type", "application/json")], answer)

    def _corrupt(self, handler):
        with self._lock:
            self.corrupted += 1
        _answer(handler, 200, [("Content-Type", "application/json")], b"this is not JSON {")

    def _forward(self, handler, body):
        host, port = self.upstream.split("://", 1)[1].split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("connection", "keep-alive")}
            connection.request(handler.command, handler.path, body=body or None, headers=headers)
            with connection.getresponse() as response:
                return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


def _answer(handler, status, headers, body):
    handler.send_response(status)
    for name, value in headers:
        if name.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"):
            handler.send_header(name, value)
    if status not in (204, 304):
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if status not in (204, 304):
        handler.wfile.write(body)


@pytest.fixture
def fault_proxy():
    """``make(upstream_url)`` starts a FaultProxy; all are closed after the test."""
    made = []

    def make(upstream):
        proxy = FaultProxy(upstream)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


def batch(body):
    """A report batch's body, read."""
    return json.loads(body)
