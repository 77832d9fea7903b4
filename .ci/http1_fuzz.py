#!/usr/bin/env python3
"""HTTP/1 requests generated and mutated by Hypothesis, sent to the real
daemon; every answer is read back by h11 (python-hyper's HTTP/1 parser) as a
client would read it.

Each request goes through both paths a connection can take: a fresh
connection (the daemon's lean front) and one that first sent a chunked
report (hyper's HTTP/1 server). The properties:
  - every answer is a well-formed HTTP/1.1 response, as h11 frames it;
  - both paths give the same answers and end the connection alike;
  - the daemon keeps answering.
Derandomized (the same examples every run), 1000 of them by default.

Usage: .ci/http1_fuzz.py path/to/stormguard [examples]
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

import h11
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METHODS = ["GET", "GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "HEAD", "get", "FROB", "G ET", ""]
PATHS = ["/healthz", "/readyz", "/v1/policies", "/v1/policies/payment-service",
         "/v1/policies/payment-service?wait=1s", "/v1/policies?services=a,payment-service",
         "/v1/reports", "/v1/pace", "/metrics", "/nowhere", "*", "http://x/healthz",
         "/v1/policies/%70ayment-service", "/v1/policies/a%00b", "/v1/render/envoy/payment-service"]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/1.1 "]
# Headers as clients send them, and ones that make framing or the host ambiguous.
USUAL = [
    "Content-Length: 2", "Content-Length: 0", "Content-Length: 20", "Transfer-Encoding: chunked",
    "Connection: close", "Connection: keep-alive", "If-None-Match: *", 'If-None-Match: "x"',
    "Content-Type: application/json", "Authorization: Bearer x", "Accept: */*",
]
ODD = [
    "Host: stormguard:8080", "Host: a b", "Host:", "Content-Length: -1", "Content-Length: 2, 2",
    "Content-Length: 99999999999999999999", "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: identity", "Connection: upgrade", "Upgrade: h2c", "Expect: 100-continue",
    "X-Folded: a\r\n b", "Bad Header: x", ": empty", "X-Nul: a\x00b", "X-Cr: a\rb",
]
BODIES = ["", "{}", '{"instance":"fuzz","sequence":1,"reports":[]}', "2\r\n{}\r\n0\r\n\r\n",
          "0\r\n\r\n", "zz\r\n", "x" * 40]
NEXT = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def one_in(n):
    """True about once in `n` draws."""
    return st.integers(0, n - 1).map(lambda k: k == 0)


@st.composite
def requests(draw):
    """A request line, headers and a body, each usual or odd; a quarter of
    them mutated at the byte level; then a plain GET behind it."""
    odd = draw(one_in(3))
    method = draw(st.sampled_from(METHODS if odd else METHODS[:8]))
    version = draw(st.sampled_from(VERSIONS if odd else VERSIONS[:2]))
    line = f"{method} {draw(st.sampled_from(PATHS))} {version}"
    headers = draw(st.lists(st.sampled_from(USUAL + ODD if odd else USUAL), max_size=4))
    if not draw(one_in(8)):
        headers.insert(0, "Host: x")
    text = line + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n" + draw(st.sampled_from(BODIES))
    raw = bytearray(text.encode("latin-1"))
    if draw(one_in(4)):
        for kind, at, byte in draw(st.lists(st.tuples(st.sampled_from("rid"), st.integers(0, 10_000),
                                                       st.integers(0, 255)), min_size=1, max_size=3)):
            at %= len(raw)
            if kind == "r":
                raw[at] = byte
            elif kind == "i":
                raw.insert(at, byte)
            else:
                del raw[at]
    return bytes(raw) + NEXT


def exchange(port, raw, through_hyper):
    """Sends `raw` (after a chunked report, for hyper), half-closes, reads all."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if through_hyper:
            body = b'{"instance":"fuzz","sequence":1,"reports":[]}'
            s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
            first, _ = read_answers(s, want=1)
            assert [status for status, _ in first] == [202], first
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return read_answers(s, head_first=raw.startswith(b"HEAD "))


def read_answers(s, want=None, head_first=False):
    """The answers on `s`, framed by h11 as a client: (status, body length)
    each; and how the connection ended. With `want`, returns once that many
    have arrived."""
    data, ending = b"", "open"
    s.settimeout(3)
    while True:
        if want is not None and len(parse(data, head_first, partial=True)) >= want:
            return parse(data, head_first, partial=True)[:want], ending
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            ending = "closed"
            break
        if not chunk:
            ending = "closed"
            break
        data += chunk
    return parse(data, head_first), ending


def parse(data, head_first, partial=False):
    """The whole answers in `data`, each read by h11 as the answer to a GET
    (to a HEAD for the first, with `head_first`). A malformed answer raises
    h11's RemoteProtocolError; one cut short fails unless `partial`."""
    answers, remaining = [], data
    while remaining:
        client = h11.Connection(h11.CLIENT)
        method = "HEAD" if head_first and not answers else "GET"
        client.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
        client.send(h11.EndOfMessage())
        client.receive_data(remaining)
        status, length = None, 0
        while True:
            event = client.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                length += len(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif event is h11.NEED_DATA:
                if partial:
                    return answers
                raise AssertionError(f"an answer cut short: {remaining[:200]!r}")
        answers.append((status, length))
        remaining = client.trailing_data[0]
    return answers


def main():
    binary = sys.argv[1]
    examples = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    directory = tempfile.mkdtemp()
    policy = os.path.join(directory, "policy.yaml")
    with open(os.path.join(ROOT, "policies", "retry-policy.yaml")) as src, open(policy, "w") as dst:
        dst.write(src.read())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen([binary, "serve", "--policy", policy, "--listen", f"127.0.0.1:{port}",
                               "--header-read-timeout", "1s", "--body-read-timeout", "1s"],
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        seen = {0: 0, 1: 0, 2: 0}

        @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(requests())
        def both_paths_answer_alike_and_well_formed(raw):
            front = exchange(port, raw, through_hyper=False)
            hyper = exchange(port, raw, through_hyper=True)
            # Statuses and endings: bodies differ in time (/metrics counts these very requests).
            statuses = lambda answers: ([status for status, _ in answers[0]], answers[1])
            assert statuses(front) == statuses(hyper), f"{raw!r}: front {front}, hyper {hyper}"
            assert daemon.poll() is None, "the daemon exited"
            seen[min(len(front[0]), 2)] += 1

        both_paths_answer_alike_and_well_formed()
        print(f"HTTP/1 fuzz: {examples} generated requests, each through the front and through hyper; "
              f"every answer well-formed by h11's reading and alike on both paths "
              f"(the request behind answered too: {seen[2]}; one answer: {seen[1]}; none: {seen[0]})")
    finally:
        daemon.kill()


if __name__ == "__main__":
    main()
