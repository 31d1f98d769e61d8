"""Plain https downloads (URL sources and wheels from the lock) over pooled keep-alive
connections: the one place kvenv downloads a file over HTTP.

A run's downloads share one :class:`Connections`. Where no proxy is configured, a wheel's body
is read by :mod:`kvenv.fetch.wire` (``http.client``, ``readinto`` a 256 KiB buffer at a time:
half the CPU of reading it through httpx2, one TLS record per Python round trip); where the
environment sets a proxy (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``), downloads go over
the httpx2 client that the run's page lookups use (the client unearth brings,
:func:`kvenv.lock.pages.new_session`), which speaks to proxies. Either way, each connection is
kept open for the next file from the same host, so a closure of 91 wheels costs a handful of
handshakes and name lookups instead of 91, and both use the same SSL context (httpx2's:
the system's certificate store, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured).

Policy, the same on both clients and applied here: only ``https://`` URLs are fetched
(:func:`kvenv._util.urls.check_url`), and every redirect target is checked by the same rule
before it is requested (a redirect to ``http://`` stops the download; at most
:data:`MAX_REDIRECTS`). User-info in a URL is sent as HTTP Basic credentials to that URL's
origin only (dropped on a redirect to another origin). Every socket operation has a timeout,
and requests carry ``User-Agent: kvenv/<version>`` and ``Accept-Encoding: identity``; the body
is read raw (the bytes hashed are the bytes served). URLs in messages are redacted
(:func:`kvenv._util.redact.redact_url`): no user-info, no query string.
"""

from __future__ import annotations

import base64
import ssl
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from kvenv import __version__
from kvenv._util.hashing import HashingWriter, size_mismatch
from kvenv._util.redact import redact_url
from kvenv._util.urls import check_url
from kvenv.errors import Cancelled, FetchError, TransientFetchError
from kvenv.fetch.wire import Pool, Reply, WireError

DEFAULT_TIMEOUT = 60.0
MAX_REDIRECTS = 10
# Connections kept open at most: one per download worker and per page lookup in flight
# (``Connections(size)`` raises it for a larger ``--jobs``), so no request waits for the pool.
POOL = 32
# The body is hashed and written in pieces of this size (a TLS record is 16 KiB): a sixteenth
# of the system calls and hash calls, the GIL taken as often less.
WRITE_BYTES = 256 * 1024
SMALL_BODY = 64 * 1024  # a redirect's or an error's body read to keep its connection open
HEADERS = {"User-Agent": f"kvenv/{__version__}", "Accept-Encoding": "identity"}
REDIRECTS = frozenset({301, 302, 303, 307, 308})
PROXY_SCHEMES = ("https", "http", "all")


class Connections:
    """The pooled HTTP clients of one run (each made on first use; thread-safe). ``close``
    (or use as a context manager) when the run is done."""

    def __init__(self, size: int = POOL) -> None:
        self.size = max(size, 1)
        self._client: Any = None
        self._direct: Pool | None = None
        self._proxied: bool | None = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The httpx2 client (a :class:`unearth.fetchers.sync.PyPIClient`)."""
        with self._lock:
            if self._client is None:
                from kvenv.lock.pages import new_session

                self._client = new_session(connections=self.size)
            return self._client

    def direct(self) -> Pool | None:
        """The :class:`kvenv.fetch.wire.Pool` for downloads; None where the environment sets
        a proxy (downloads then go over :meth:`client`, which speaks to it)."""
        with self._lock:
            if self._proxied is None:
                self._proxied = proxy_configured()
            if self._proxied:
                return None
            if self._direct is None:
                self._direct = Pool(ssl_context)
            return self._direct

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            direct, self._direct = self._direct, None
        if client is not None:
            client.close()
        if direct is not None:
            direct.close()

    def __enter__(self) -> Connections:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def proxy_configured() -> bool:
    """Whether the environment (or, on macOS and Windows, the system) names a proxy for
    http(s) that is not turned off for every host (``NO_PROXY=*``): what makes httpx2 use one."""
    from urllib.request import getproxies

    found = getproxies()
    if found.get("no", "").strip() == "*" or "*" in found.get("no", "").split(","):
        return False
    return any(found.get(scheme) for scheme in PROXY_SCHEMES)


def ssl_context() -> ssl.SSLContext:
    """httpx2's SSL context (the system's store; ``SSL_CERT_FILE``/``SSL_CERT_DIR``): the
    direct downloads trust exactly what the page lookups trust."""
    import httpx2

    context: ssl.SSLContext = httpx2.create_ssl_context()
    return context


def _content_length(value: str | None) -> int | None:
    """A Content-Length header's value; None when absent or not ASCII digits ("²" is a digit
    to ``str.isdigit`` but not to ``int``)."""
    return int(value) if value and value.isascii() and value.isdigit() else None


# Called as ``progress(done, total)``: the bytes received so far and the expected size.
ByteProgress = Callable[[int, int | None], None]


class _Reply(Protocol):
    """A response whose body is not read yet, from either client."""

    status: int
    reason: str

    def header(self, name: str) -> str | None: ...

    def pieces(self) -> Iterator[bytes | memoryview]: ...

    def finish(self) -> None: ...

    def close(self) -> None: ...


Send = Callable[[str, Mapping[str, str], float], _Reply]


def download(
    url: str,
    sink: HashingWriter,
    *,
    size: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cancel: threading.Event | None = None,
    progress: ByteProgress | None = None,
    connections: Connections | None = None,
) -> None:
    """Stream ``url`` into ``sink`` over ``connections`` (None: clients of its own, closed
    after). The caller checks the digest (``sink.check``)."""
    check_url(url)
    if connections is None:
        with Connections(1) as own:
            return download(
                url,
                sink,
                size=size,
                timeout=timeout,
                cancel=cancel,
                progress=progress,
                connections=own,
            )
    shown = redact_url(url)
    pool = connections.direct()
    send: Send = _over_wire(pool) if pool is not None else _over_httpx(connections.client())
    try:
        reply = _open(send, url, timeout)
        try:
            _stream(reply, sink, shown, size=size, cancel=cancel, progress=progress)
        except BaseException:
            reply.close()
            raise
        reply.finish()
    except FetchError:
        raise
    except Exception as exc:
        error = _as_fetch_error(exc, shown, sink)
        if error is None:
            raise
        raise error from None


def _open(send: Send, url: str, timeout: float) -> _Reply:
    """The response to ``GET url`` with its body not read yet, redirects followed within the
    policy; an HTTP error status raised as a :class:`FetchError`."""
    auth = _basic_auth(url)
    for _ in range(MAX_REDIRECTS + 1):
        headers = dict(HEADERS)
        if auth is not None:
            headers["Authorization"] = auth
        reply = send(_without_userinfo(url), headers, timeout)
        location = reply.header("Location") if reply.status in REDIRECTS else None
        if location is None:
            break
        reply.finish()
        target = _redirect_target(url, location)
        try:
            check_url(target, what="redirect to")
        except FetchError:
            raise FetchError(
                f"refusing redirect from {redact_url(url)} to "
                f"{redact_url(target)}: only https:// is allowed",
                hint="the server redirects to an insecure location; nothing was downloaded",
            ) from None
        own = _basic_auth(target)
        auth = own if own is not None or _origin(target) != _origin(url) else auth
        url = target
    else:
        reply.close()
        raise FetchError(
            f"download failed: more than {MAX_REDIRECTS} redirects for {redact_url(url)}"
        )
    if reply.status >= 400:
        status, reason = reply.status, reply.reason
        reply.finish()
        cls = TransientFetchError if status >= 500 or status in (408, 429) else FetchError
        raise cls(f"download failed: HTTP {status} {reason} for {redact_url(url)}")
    return reply


def _redirect_target(url: str, location: str) -> str:
    """The absolute URL a ``Location`` names, relative to ``url``."""
    try:
        target = urljoin(url, location.strip())
        urlsplit(target).port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise FetchError(
            f"download failed: {redact_url(url)} redirects to an invalid URL"
        ) from None
    return target


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port


def _basic_auth(url: str) -> str | None:
    """The ``Authorization`` value for a URL's user-info (None: it has none)."""
    parts = urlsplit(url)
    if parts.username is None:
        return None
    secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(secret.encode()).decode("ascii")


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _stream(
    reply: _Reply,
    sink: HashingWriter,
    shown: str,
    *,
    size: int | None,
    cancel: threading.Event | None,
    progress: ByteProgress | None,
) -> None:
    """The body of ``reply``, raw, into ``sink``, checked against its announced length."""
    announced = _content_length(reply.header("Content-Length"))
    total = announced if announced is not None else size
    if size is not None and announced is not None and announced != size:
        raise size_mismatch(shown, size, announced)
    for piece in reply.pieces():
        if cancel is not None and cancel.is_set():
            raise Cancelled(f"download of {shown} cancelled")
        sink.write(piece)
        if progress is not None:
            progress(sink.size, total)
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"download of {shown} cancelled")
    if announced is not None and sink.size < announced:
        raise TransientFetchError(
            f"download failed: connection closed after {sink.size} of {announced} bytes for {shown}"
        )


# --- the two clients ---------------------------------------------------------------------------


class _WireReply:
    def __init__(self, reply: Reply) -> None:
        self._reply = reply
        self.status: int = reply.status
        self.reason: str = reply.reason

    def header(self, name: str) -> str | None:
        value: str | None = self._reply.header(name)
        return value

    def pieces(self) -> Iterator[memoryview]:
        """The body, ``WRITE_BYTES`` at a time (each piece valid until the next is asked)."""
        view = memoryview(bytearray(WRITE_BYTES))
        readinto = self._reply.readinto
        while True:
            count = readinto(view)
            if not count:
                return
            yield view[:count]

    def finish(self) -> None:
        """Give the connection back, reading a small body first so it can be reused (a body
        that fails to arrive closes it instead)."""
        length = _content_length(self.header("Content-Length"))
        if length is not None and length <= SMALL_BODY:
            view = memoryview(bytearray(max(length, 1)))
            try:
                while self._reply.readinto(view):
                    pass
            except WireError:
                self._reply.close()
                return
        self._reply.release()

    def close(self) -> None:
        self._reply.close()


def _over_wire(pool: Pool) -> Send:
    def send(url: str, headers: Mapping[str, str], timeout: float) -> _Reply:
        return _WireReply(pool.get(url, headers, timeout))

    return send


class _HttpxReply:
    def __init__(self, response: Any) -> None:
        self._response = response
        self.status = int(response.status_code)
        self.reason = str(response.reason_phrase)

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    def pieces(self) -> Iterator[bytes]:
        """The body, coalesced from one TLS record per piece into ``WRITE_BYTES`` pieces."""
        pending: list[bytes] = []
        held = 0
        for piece in self._response.iter_raw():
            pending.append(piece)
            held += len(piece)
            if held >= WRITE_BYTES:
                yield b"".join(pending)
                pending.clear()
                held = 0
        if pending:
            yield b"".join(pending)

    def finish(self) -> None:
        """Close, reading a small body first so its connection can be reused."""
        length = _content_length(self.header("Content-Length"))
        if length is not None and length <= SMALL_BODY and not self._response.is_stream_consumed:
            self._response.read()
        self._response.close()

    def close(self) -> None:
        self._response.close()


def _over_httpx(client: Any) -> Send:
    def send(url: str, headers: Mapping[str, str], timeout: float) -> _Reply:
        request = client.build_request("GET", url, headers=dict(headers), timeout=timeout)
        return _HttpxReply(client.send(request, stream=True, follow_redirects=False))

    return send


# --- what went wrong on the connection ---------------------------------------------------------


def _as_fetch_error(exc: Exception, shown: str, sink: HashingWriter) -> FetchError | None:
    """What went wrong on the connection, from either client, as a :class:`FetchError`
    (transient where a retry may help); None for anything else (the sink's own errors)."""
    closed = f"download failed: connection closed after {sink.size} bytes for {shown}"
    if isinstance(exc, WireError):
        if exc.kind == "timeout":
            return TransientFetchError(f"download failed: timed out for {shown}")
        if exc.kind == "closed":
            return TransientFetchError(closed)
        if exc.kind == "url":
            return FetchError(f"download failed: {_reason(exc)} for {shown}")
        return TransientFetchError(f"download failed: {_reason(exc)} for {shown}")
    httpx2 = sys.modules.get("httpx2")
    if httpx2 is None:
        return None
    if isinstance(exc, httpx2.TimeoutException):
        return TransientFetchError(f"download failed: timed out for {shown}")
    if isinstance(exc, httpx2.RemoteProtocolError):
        return TransientFetchError(closed)
    if isinstance(exc, httpx2.TransportError):
        return TransientFetchError(f"download failed: {_reason(exc)} for {shown}")
    if isinstance(exc, httpx2.HTTPError | httpx2.InvalidURL | UnicodeError):  # a URL it cannot ask
        return FetchError(f"download failed: {_reason(exc)} for {shown}")
    return None


def _reason(exc: Exception) -> str:
    """What went wrong on the connection, without any URL in it."""
    from kvenv.lock.pages import without_urls

    text = without_urls(str(exc)).strip()
    return text or type(exc).__name__
