"""How the Python client reaches the daemon beyond its URL: the TLS files
(checked when the watch or reporter is made, followed as they rotate) and
the service-account token file (read at each send)."""

import base64
import http.client
import http.server
import logging
import socket
import ssl
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT
from stormguard_client import DaemonTls, PolicyWatch, Reporter, TlsFileError
from stormguard_client.connect import TLS_RECHECK, Connection, TokenFile

CREDENTIALS = ROOT / "clients" / "credentials"


def credential(name):
    return CREDENTIALS / name


def test_a_ca_and_a_client_certificate_build_a_context():
    tls = DaemonTls(ca_file=credential("ca.crt"), cert_file=str(credential("client.crt")),
                    key_file=credential("client.key"))
    context = Connection(tls).context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == \
        [((("commonName", "stormguard conformance CA (tests only)"),),)], "the CA file only, not the system's"
    assert Connection().context() is None, "no files: urllib's default"
    assert Connection(DaemonTls(cert_file=credential("client.crt"), key_file=credential("client.key"))).context()


def test_each_unusable_tls_file_is_named_with_what_is_wrong(tmp_path):
    not_pem = tmp_path / "not-pem.crt"
    not_pem.write_text("hello")
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_text("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                         "DEK-Info: AES-128-CBC,00112233445566778899AABBCCDDEEFF\n\n"
                         f"{base64.b64encode(bytes(48)).decode()}\n-----END RSA PRIVATE KEY-----\n")
    client_crt, client_key = credential("client.crt"), credential("client.key")
    cases = [
        (DaemonTls(ca_file=tmp_path / "absent.crt"), tmp_path / "absent.crt", "cannot be read"),
        (DaemonTls(ca_file=not_pem), not_pem, "no CERTIFICATE block"),
        (DaemonTls(cert_file=client_crt), client_crt, "needs both cert_file and key_file"),
        (DaemonTls(key_file=client_key), client_key, "needs both cert_file and key_file"),
        (DaemonTls(cert_file=not_pem, key_file=client_key), not_pem, "no CERTIFICATE block"),
        (DaemonTls(cert_file=client_crt, key_file=not_pem), not_pem, "no PRIVATE KEY block"),
        (DaemonTls(cert_file=client_crt, key_file=tmp_path / "absent.key"), tmp_path / "absent.key",
         "cannot be read"),
        (DaemonTls(cert_file=client_crt, key_file=credential("daemon.key")), client_crt,
         "with its key file .*daemon.key: .*key values mismatch"),
        (DaemonTls(cert_file=client_crt, key_file=encrypted), encrypted, "is encrypted"),
    ]
    for tls, file, problem in cases:
        with pytest.raises(TlsFileError, match=problem) as refused:
            Connection(tls)
        assert str(refused.value).startswith(f"{file}: "), str(refused.value)
        assert refused.value.file == file
    with pytest.raises(ValueError, match="ca_file must be a path"):
        DaemonTls(ca_file=3)
    with pytest.raises(ValueError, match="tls must be a DaemonTls"):
        Connection({"ca_file": "ca.crt"})


def test_the_watch_and_the_reporter_refuse_unusable_tls_files_naming_them(tmp_path):
    absent = tmp_path / "absent.crt"
    with pytest.raises(ValueError, match=f"{absent}: cannot be read"):
        PolicyWatch("https://localhost:1", ["payments"], tls=DaemonTls(ca_file=absent))
    with pytest.raises(ValueError, match=f"{absent}: cannot be read"):
        Reporter("https://localhost:1", "pod-1", tls=DaemonTls(ca_file=absent))
    with pytest.raises(ValueError, match="token_file must be a path"):
        Reporter("https://localhost:1", "pod-1", token_file=7)


class HttpsServer:
    """A loopback HTTPS server with the daemon's certificate (for 127.0.0.1)
    that answers every GET 200 "ok"."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(credential("daemon.crt"), credential("daemon.key"))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.server.server_port}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def https_server():
    server = HttpsServer()
    yield server
    server.close()


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def trusted(connection, url):
    """Whether a GET of ``url`` through ``connection`` trusts the server."""
    try:
        with connection.open(urllib.request.Request(url), timeout=5) as answer:
            return answer.read() == b"ok"
    except urllib.error.URLError as error:
        assert isinstance(error.reason, ssl.SSLCertVerificationError), error
        return False


def test_changed_tls_files_rebuild_the_context_and_unusable_ones_keep_it(tmp_path, https_server, caplog):
    ca = tmp_path / "ca.crt"
    ca.write_bytes(credential("client.crt").read_bytes())  # a certificate, but not the daemon's CA
    clock = Clock()
    connection = Connection(DaemonTls(ca_file=ca), clock=clock)
    first = connection.context()
    assert not trusted(connection, https_server.url)

    ca.write_bytes(credential("ca.crt").read_bytes())
    clock.now += TLS_RECHECK - 1
    assert connection.context() is first and not trusted(connection, https_server.url), \
        "not looked at again within a minute"
    clock.now += 1
    assert connection.context() is not first, "changed: rebuilt"
    assert trusted(connection, https_server.url)

    second = connection.context()
    clock.now += TLS_RECHECK
    assert connection.context() is second, "unchanged: kept"

    with caplog.at_level(logging.ERROR, logger="stormguard_client.connect"):
        ca.write_text("not a certificate")
        clock.now += TLS_RECHECK
        assert connection.context() is second, "unusable: the context in use stays"
        ca.unlink()
        clock.now += TLS_RECHECK
        assert connection.context() is second, "gone: the context in use stays"
    assert trusted(connection, https_server.url)
    assert "no CERTIFICATE block" in caplog.text and "cannot be read" in caplog.text
    assert str(ca) in caplog.text and "stay in use" in caplog.text

    bundle = credential("ca.crt").read_bytes() + credential("daemon.crt").read_bytes()
    ca.write_bytes(bundle)
    clock.now += TLS_RECHECK
    assert connection.context() is not second and connection._contents.ca == bundle, "usable again: rebuilt"
    assert trusted(connection, https_server.url)


def test_a_rotated_client_certificate_is_followed(tmp_path):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(credential("client.crt").read_bytes())
    key.write_bytes(credential("client.key").read_bytes())
    clock = Clock()
    connection = Connection(DaemonTls(cert_file=cert, key_file=key), clock=clock)
    first = connection.context()
    # cert-manager writes the two files one after the other: in between they do not match.
    cert.write_bytes(credential("daemon.crt").read_bytes())
    clock.now += TLS_RECHECK
    assert connection.context() is first, "a certificate without its key: kept"
    key.write_bytes(credential("daemon.key").read_bytes())
    clock.now += TLS_RECHECK
    assert connection.context() is not first, "the pair: rebuilt"


def test_the_token_is_read_at_each_read_and_follows_a_rotation(tmp_path):
    file = tmp_path / "token"
    file.write_text("first-token\n")
    tokens = TokenFile(file)
    assert tokens.token() == "first-token"
    file.write_text("rotated-token")
    assert tokens.token() == "rotated-token"
    request = tokens.authorize(urllib.request.Request("http://127.0.0.1:9/v1/reports"))
    assert request.get_header("Authorization") == "Bearer rotated-token"
    assert TokenFile(None).token() is None
    assert not TokenFile().authorize(urllib.request.Request("http://127.0.0.1:9/")).has_header("Authorization")


def test_without_a_usable_token_nothing_is_sent_and_each_error_is_logged_once(tmp_path, caplog):
    file = tmp_path / "token"
    tokens = TokenFile(file)
    with caplog.at_level(logging.ERROR, logger="stormguard_client.connect"):
        assert [tokens.token() for _ in range(3)] == [None] * 3
        assert len(caplog.records) == 1 and str(file) in caplog.text and "No such file" in caplog.text
        file.write_text("  \n")
        assert [tokens.token() for _ in range(2)] == [None] * 2
        assert len(caplog.records) == 2 and "empty" in caplog.records[1].getMessage()
        file.write_text("bad\ttoken\n")
        assert tokens.token() is None and len(caplog.records) == 3
        file.write_text("now-there")
        assert tokens.token() == "now-there"
        file.unlink()
        assert tokens.token() is None
    assert len(caplog.records) == 4, "missing again after a good read: logged again"


class _Counting(http.server.BaseHTTPRequestHandler):
    """Answers every POST 200 with its body, over HTTP/1.1 keep-alive,
    counting the connections it was given; `close` makes it close each."""

    protocol_version = "HTTP/1.1"
    connections = []
    close = False

    def setup(self):
        super().setup()
        type(self).connections.append(self.client_address)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if type(self).close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_kept_connection_carries_asks_one_after_another_and_is_made_again_when_closed():
    _Counting.connections, _Counting.close = [], False
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kept = Connection().kept(f"http://127.0.0.1:{server.server_port}/")
        for n in range(5):
            assert kept.post("/v1/pace", str(n).encode(), {}, 2) == (200, str(n).encode())
        assert len(_Counting.connections) == 1, "one connection for every ask"
        _Counting.close = True
        assert kept.post("/v1/pace", b"x", {}, 2) == (200, b"x"), "the answer that closes it"
        assert kept.post("/v1/pace", b"y", {}, 2) == (200, b"y"), "made again after the daemon closed it"
        assert len(_Counting.connections) == 2
        kept.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_kept_connection_needs_an_http_address():
    with pytest.raises(ValueError, match="http:// or https://"):
        Connection().kept("ftp://daemon")


class _Late(http.server.BaseHTTPRequestHandler):
    """Answers every POST with its body over HTTP/1.1 keep-alive, noting
    each body it read; a body ``late`` is answered after ``delay`` seconds,
    and after a body ``hang-up`` the connection is closed unanswered, as a
    daemon closes an idle kept connection (the next request on it is never
    read)."""

    protocol_version = "HTTP/1.1"
    bodies = []
    delay = 1.0

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append(body)
        if body == b"late":
            time.sleep(type(self).delay)
        if body == b"reset":
            # An answer begun, then the connection reset mid-body.
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"partial")
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if body == b"hang-up":
            self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def late_server():
    _Late.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Late)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_ask_on_a_kept_connection_that_times_out_is_not_sent_again(late_server):
    """The daemon read the ask, and may have counted it: sent again, its
    outcomes would count twice, and the ask would take twice its timeout."""
    kept = Connection().kept(f"http://127.0.0.1:{late_server.server_port}")
    assert kept.post("/v1/pace", b"first", {}, 2) == (200, b"first")
    with pytest.raises(TimeoutError):
        kept.post("/v1/pace", b"late", {}, 0.3)
    assert _Late.bodies == [b"first", b"late"], "sent once"
    assert kept.post("/v1/pace", b"next", {}, 2) == (200, b"next"), "a new connection for the next"
    kept.close()


def test_an_ask_whose_answer_is_cut_off_is_not_sent_again(late_server):
    kept = Connection().kept(f"http://127.0.0.1:{late_server.server_port}")
    assert kept.post("/v1/pace", b"first", {}, 2) == (200, b"first")
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        kept.post("/v1/pace", b"reset", {}, 2)
    assert _Late.bodies == [b"first", b"reset"], "sent once"
    kept.close()


def test_a_kept_connection_the_daemon_closed_unannounced_is_made_again_and_the_ask_sent_on_it(late_server):
    kept = Connection().kept(f"http://127.0.0.1:{late_server.server_port}")
    assert kept.post("/v1/pace", b"hang-up", {}, 2) == (200, b"hang-up")
    time.sleep(0.1)  # the server has closed it, without Connection: close
    assert kept.post("/v1/pace", b"after", {}, 2) == (200, b"after")
    assert _Late.bodies == [b"hang-up", b"after"], "the ask on the closed connection was never read"
    kept.close()
