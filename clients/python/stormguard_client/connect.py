"""How the client reaches the daemon beyond its URL, as the Rust library's
``connect`` module does: the CA its certificate must chain to, the
certificate this process presents, and the service-account token its
reports carry. Each is a file that Kubernetes rotates in place
(cert-manager's Secrets, the kubelet's projected token), so each is read
again rather than once:

- the TLS files (:class:`DaemonTls`) are read again at most every
  ``TLS_RECHECK`` seconds, when a request is about to go; if their contents
  changed the SSL context is built again from them, and if the new files
  cannot be used the context in use stays (the error is logged);
- the token file (:class:`TokenFile`) is read at each send.
"""

import dataclasses
import http.client
import logging
import os
import pathlib
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import NoReturn, TypeAlias

TLS_RECHECK = 60.0
"""Seconds between two reads of the TLS files to see whether they changed."""

log = logging.getLogger(__name__)

Path: TypeAlias = str | os.PathLike[str]
"""A file's path."""


class TlsFileError(ValueError):
    """A TLS file (CA, client certificate or key) cannot be read or used;
    the message is ``"<file>: <what is wrong>"``."""

    def __init__(self, file: Path | None, problem: str) -> None:
        super().__init__(f"{file}: {problem}")
        self.file = file
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class DaemonTls:
    """TLS towards an ``https://`` daemon, for the policy watch and the
    reporter alike. Empty, the daemon's certificate is checked against the
    system's CAs and no client certificate is sent. Each file is a path
    (str or path-like); none is read for an ``http://`` daemon's sake, but
    all are checked when the watch or reporter is made."""

    ca_file: Path | None = None
    """PEM CA certificates the daemon's certificate must chain to, in place of
    the system's (e.g. the ``ca.crt`` of the daemon's cert-manager Secret)."""
    cert_file: Path | None = None
    """PEM certificate chain this process presents, for a daemon that requires
    client certificates; needs ``key_file``."""
    key_file: Path | None = None
    """PEM private key of ``cert_file`` (not encrypted)."""

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not isinstance(path, (str, os.PathLike)):
                raise ValueError(f"{name} must be a path, not {path!r}")

    @property
    def files(self) -> bool:
        """Whether any file is set."""
        return any(f is not None for f in (self.ca_file, self.cert_file, self.key_file))


@dataclasses.dataclass(frozen=True)
class _Contents:
    """What :class:`DaemonTls`'s files held when last read (None: not set)."""

    ca: bytes | None
    cert: bytes | None
    key: bytes | None


def _read_file(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as error:
        raise TlsFileError(path, f"cannot be read: {error.strerror or error}") from error


def read_tls(tls: DaemonTls) -> _Contents:
    """Each of ``tls``'s files' contents, now. Raises TlsFileError."""
    return _Contents(_read_file(tls.ca_file), _read_file(tls.cert_file), _read_file(tls.key_file))


def _no_password() -> NoReturn:
    raise TlsFileError("key_file", "is encrypted; give the key without a passphrase")


def build_context(tls: DaemonTls, contents: _Contents) -> ssl.SSLContext | None:
    """An SSL context from ``contents`` (as read from ``tls``'s files), or
    None when no file is set (the system's CAs, no client certificate).
    Raises TlsFileError naming the file that cannot be used."""
    if not tls.files:
        return None
    if contents.ca is not None:
        pem = contents.ca.decode("ascii", errors="replace")
        if "-----BEGIN CERTIFICATE-----" not in pem:
            raise TlsFileError(tls.ca_file, "no CERTIFICATE block")
        try:
            # With CA data, create_default_context loads none of the system's.
            context = ssl.create_default_context(cadata=pem)
        except (ssl.SSLError, ValueError) as error:
            raise TlsFileError(tls.ca_file, str(error)) from error
    else:
        context = ssl.create_default_context()
    cert_file, key_file = tls.cert_file, tls.key_file
    if (cert_file is None) != (key_file is None):
        raise TlsFileError(cert_file or key_file, "a client certificate needs both cert_file and key_file")
    if cert_file is not None and key_file is not None:
        _load_identity(context, cert_file, key_file, contents)
    return context


def _load_identity(context: ssl.SSLContext, cert_file: Path, key_file: Path, contents: _Contents) -> None:
    """Loads the client certificate and its key. ssl loads them from their
    paths only, so what was read is checked first, for errors that name the
    file; a rotation between the two shows at the next check as a change."""
    if b"-----BEGIN CERTIFICATE-----" not in (contents.cert or b""):
        raise TlsFileError(cert_file, "no CERTIFICATE block")
    if b"PRIVATE KEY-----" not in (contents.key or b""):
        raise TlsFileError(key_file, "no PRIVATE KEY block")
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_password)
    except TlsFileError as error:
        raise TlsFileError(key_file, error.problem) from None
    except (ssl.SSLError, OSError, ValueError) as error:
        raise TlsFileError(cert_file, f"with its key file {key_file}: {error}") from error


class Connection:
    """Requests to the daemon with ``tls``'s SSL context, built again when
    its files change (looked at every ``TLS_RECHECK`` seconds); a change
    that cannot be used keeps the context in use, and is logged. Raises
    TlsFileError, naming the file, when the files cannot be used at first."""

    def __init__(self, tls: DaemonTls | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        if tls is None:
            tls = DaemonTls()
        if not isinstance(tls, DaemonTls):
            raise ValueError(f"tls must be a DaemonTls, not {tls!r}")
        self.tls = tls
        self._clock = clock
        self._lock = threading.Lock()
        self._contents = read_tls(tls)
        self._context = build_context(tls, self._contents)
        self._checked = clock()

    def context(self) -> ssl.SSLContext | None:
        """The SSL context to connect with now (None: urllib's default)."""
        if not self.tls.files:
            return None
        with self._lock:
            if self._clock() - self._checked >= TLS_RECHECK:
                self._checked = self._clock()
                self._follow_files()
            return self._context

    def open(self, request: urllib.request.Request, timeout: float) -> http.client.HTTPResponse:
        """``urllib.request.urlopen`` of ``request`` (an http(s) one) with the current context."""
        answer: http.client.HTTPResponse = urllib.request.urlopen(request, timeout=timeout, context=self.context())
        return answer

    def kept(self, daemon: str) -> "KeptConnection":
        """A :class:`KeptConnection` to ``daemon`` (its base URL) with this
        connection's TLS."""
        return KeptConnection(daemon, self)

    def _follow_files(self) -> None:
        """Builds the context again if the files' contents changed. Holds the lock."""
        try:
            contents = read_tls(self.tls)
            if contents == self._contents:
                return
            context = build_context(self.tls, contents)
        except TlsFileError as error:
            log.error("stormguard: the daemon's TLS files changed and cannot be used (%s); "
                      "the ones read before stay in use", error)
            return
        self._context, self._contents = context, contents
        log.info("stormguard: the daemon's TLS files changed; new connections use them")


class TokenFile:
    """The service-account token file reports carry, read at each send: the
    kubelet replaces it well before it expires, and a send is rare enough
    that reading a small file costs nothing that matters. A file that
    cannot be read, or holds no token, is logged once per distinct error
    (not at every send), and the request goes without a token."""

    def __init__(self, path: Path | None = None) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"token_file must be a path, not {path!r}")
        self.path = pathlib.Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._last_error: str | None = None

    def token(self) -> str | None:
        """The token the file holds now (whitespace around it stripped), or
        None when there is no file or it cannot be read or is empty."""
        if self.path is None:
            return None
        try:
            token, error = self.path.read_text().strip(), None
        except (OSError, UnicodeDecodeError) as failure:
            token, error = None, str(failure)
        if token == "":
            error = "the file is empty"
        elif token is not None and not (token.isascii() and token.isprintable()):
            token, error = None, "the file holds characters a header cannot carry"
        with self._lock:
            if error is not None and error != self._last_error:
                log.error("stormguard: cannot read the service-account token %s (%s); reports go without it",
                          self.path, error)
            self._last_error = error
        return token if error is None else None

    def authorize(self, request: urllib.request.Request) -> urllib.request.Request:
        """Adds ``Authorization: Bearer <token>`` to ``request`` (a
        urllib.request.Request) when the file holds a token; without one the
        request goes as it is (a daemon that requires tokens answers 401,
        and the reporter keeps the batch). Returns ``request``."""
        token = self.token()
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        return request


class KeptConnection:
    """One connection to the daemon kept open between requests made often
    (pace asks, every 100 ms): made at the first request, and again after
    one fails. Behind a Kubernetes Service, which balances connections, it
    also keeps one process's asks on one daemon replica, as the Rust and Go
    clients' pooled connections do: a replica paces the processes whose
    asks reach it, and a process whose asks alternated between replicas
    would be counted, and given a share, by each. Not thread-safe: one
    thread asks."""

    def __init__(self, daemon: str, connection: Connection) -> None:
        url = urllib.parse.urlsplit(daemon)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the daemon's address must be http:// or https://, not {daemon!r}")
        self._url, self._host, self._base_path = url, url.hostname, url.path.rstrip("/")
        self._connection = connection
        self._open: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        """POSTs ``body`` to ``path`` with ``headers``: (status, body).

        When a kept connection turns out closed by the daemon (an idle one it
        let go) before any answer came, the request is made once more on a
        new connection. Any other failure, a timeout above all, raises
        OSError or http.client.HTTPException and is not sent again: the
        daemon may have read the request and counted what it carried, and a
        second one would double that and the caller's wait. The next request
        makes a new connection."""
        for attempt in (0, 1):
            reused = self._open is not None
            connection = self._open or self._connect(timeout)
            self._open = None
            try:
                connection.timeout = timeout
                if connection.sock is not None:
                    connection.sock.settimeout(timeout)
                connection.request("POST", self._base_path + path, body=body, headers=headers)
                answer = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                if reused and attempt == 0 and _closed_by_the_daemon(error):
                    continue
                raise
            try:
                data = answer.read()
            except (OSError, http.client.HTTPException):
                connection.close()  # an answer begun: never sent again
                raise
            self._open = None if answer.will_close else connection
            return answer.status, data
        raise AssertionError("unreachable: the second attempt returns or raises")

    def close(self) -> None:
        """Closes the kept connection, if any."""
        if self._open is not None:
            self._open.close()
            self._open = None

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        host, port = self._host, self._url.port
        if self._url.scheme == "https":
            context = self._connection.context() or ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        return http.client.HTTPConnection(host, port, timeout=timeout)


def _closed_by_the_daemon(error: BaseException) -> bool:
    """Whether ``error`` is a connection closed or reset by the other end
    with no answer begun: on a kept connection, the daemon closing it as
    idle while the request was on its way."""
    return isinstance(error, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected))
