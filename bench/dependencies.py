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


PG_BIN = "/usr/lib/postgresql/15/bin"


class Postgres:
    """A real PostgreSQL (Debian's package) on loopback, run as the
    `postgres` user from a throwaway data directory: `max_connections` is
    its capacity, and it logs every connection it receives, so that the
    backends it started can be counted. Clients connect as the role `app`,
    which cannot use the slots kept for superusers."""

    RESERVED = 3

    def __init__(self, capacity):
        self.dir = tempfile.mkdtemp(prefix="stormguard-postgres-")
        shutil.chown(self.dir, "postgres")
        self.data, self.log = os.path.join(self.dir, "data"), os.path.join(self.dir, "log")
        self.port = free_port()
        self.capacity = capacity
        self.as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres"])
        self.start()
        self.as_postgres([f"{PG_BIN}/psql", "-h", self.dir, "-p", str(self.port), "-U", "postgres", "-qc",
                          "CREATE ROLE app LOGIN"])
        self.dsn = f"host=127.0.0.1 port={self.port} user=app dbname=postgres"

    @staticmethod
    def as_postgres(command):
        subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        """Starts the server and waits until it accepts connections."""
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                   f"-c max_connections={self.capacity + self.RESERVED} "
                   f"-c superuser_reserved_connections={self.RESERVED} -c log_connections=on")
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-o", options, "-l", self.log, "-w", "start"])

    def crash(self):
        """Stops the server at once, as a crash or a node lost does."""
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"])

    def connections_received(self):
        """Connections the server has received (a backend started for each)."""
        with open(self.log, errors="replace") as f:
            return sum("connection received" in line for line in f)

    def stop(self):
        try:
            self.crash()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
