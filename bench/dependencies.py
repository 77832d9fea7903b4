"""Real dependencies that are not this project's code, for bench/real_fleet.py:
each started on loopback, down until a given instant and then limited by a
stock server's own limiter, with what it counted.

- HAProxy (Debian's package) rate-limiting with a stick table, as its
  documentation and most guides configure it: every request is tracked in
  `http_req_rate(1s)` and a request is denied with 429 while that rate is
  above the limit. The rate counts denied requests too, so a herd that
  sends more than the limit is refused whole, not just its excess, until it
  slows below the limit. Behind it, Python's stock `http.server`, started
  when the outage ends; until then HAProxy answers 503 (no server up).
"""
import csv
import io
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

from harness import free_port

HAPROXY_CONFIG = """
global
    maxconn 8000
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout queue 1s
    retries 0
frontend limited
    bind 127.0.0.1:{port}
    stick-table type integer size 1 expire 10s store http_req_rate(1s)
    http-request track-sc0 int(1)
    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {limit} }}
    default_backend served
backend served
    option httpchk GET /call
    server web 127.0.0.1:{backend} check inter 100ms fall 1 rise 1
frontend stats
    bind 127.0.0.1:{stats}
    stats enable
    stats uri /stats
"""


class Haproxy:
    """HAProxy limiting to `limit` requests a second in front of a stock web
    server that comes up at `up_at` (seconds since the epoch)."""

    def __init__(self, limit, up_at):
        self.limit = limit
        self.dir = tempfile.mkdtemp(prefix="stormguard-haproxy-")
        with open(os.path.join(self.dir, "call"), "w") as f:
            f.write("served\n")
        self.backend_port, self.stats_port, port = free_port(), free_port(), free_port()
        config = os.path.join(self.dir, "haproxy.cfg")
        with open(config, "w") as f:
            f.write(HAPROXY_CONFIG.format(port=port, limit=limit, backend=self.backend_port, stats=self.stats_port))
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.haproxy = subprocess.Popen([haproxy, "-f", config, "-db"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.address = f"http://127.0.0.1:{port}"
        self.backend = None
        self.timer = threading.Timer(max(0.0, up_at - time.time()), self.bring_up)
        self.timer.start()
        self.wait_for(f"http://127.0.0.1:{self.stats_port}/stats;csv")

    @staticmethod
    def wait_for(url):
        deadline = time.time() + 10
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                return
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def bring_up(self):
        self.backend = subprocess.Popen(
            ["python3", "-m", "http.server", str(self.backend_port), "--bind", "127.0.0.1",
             "--directory", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stats(self):
        """Requests HAProxy received, and how many the web server answered
        200: the rest were refused (429 by the limit, 503 with no server up)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5) as response:
            text = response.read().decode().lstrip("# ")
        rows = {(row["pxname"], row["svname"]): row for row in csv.DictReader(io.StringIO(text))}
        frontend = rows[("limited", "FRONTEND")]
        received = int(frontend["req_tot"])
        accepted = int(frontend["hrsp_2xx"])
        return {"received": received, "accepted": accepted, "denied": int(frontend["dreq"] or 0),
                "requests_per_second": [], "accepted_per_second": []}

    def stop(self):
        self.timer.cancel()
        for process in (self.haproxy, self.backend):
            if process:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
