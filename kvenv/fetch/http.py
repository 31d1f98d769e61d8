"""Plain https downloads (URL sources and wheels from the lock) over pooled keep-alive
connections: the one place kvenv downloads a file over HTTP.

A run's downloads share one :class:`Connections`: one httpx2 client (the client unearth
brings, :func:`kvenv.lock.pages.new_session`), thread-safe, whose pool keeps each TCP+TLS
connection open for the next file from the same host, so a closure of 91 wheels costs a
handful of handshakes and name lookups instead of 91. The page lookups of the same run go
over the same client (:class:`kvenv.fetch.locate.Locator`).

Policy (:func:`kvenv._util.urls.check_url`): only ``https://`` URLs are fetched, and every
redirect target is checked by the same rule before it is requested (a redirect to
``http://`` stops the download; at most :data:`MAX_REDIRECTS`). Certificates are verified
against the system's certificate store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), the
environment's proxies are used, every socket operation has a timeout, and requests carry
``User-Agent: kvenv/<version>`` and ``Accept-Encoding: identity``; the body is read raw (the
bytes hashed are the bytes served). URLs in messages are redacted
(:func:`kvenv._util.redact.redact_url`): no user-info, no query string.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from kvenv import __version__
from kvenv._util.hashing import HashingWriter, size_mismatch
from kvenv._util.redact import redact_url
from kvenv._util.urls import check_url
from kvenv.errors import Cancelled, FetchError, TransientFetchError

DEFAULT_TIMEOUT = 60.0
MAX_REDIRECTS = 10
# Connections kept open at most: one per download worker and per page lookup in flight
# (``Connections(size)`` raises it for a larger ``--jobs``), so no request waits for the pool.
POOL = 32
# The body arrives a TLS record (16 KiB) at a time; it is hashed and written in pieces of this
# size, a sixteenth of the system calls and hash calls (the GIL taken as often less).
WRITE_BYTES = 256 * 1024
SMALL_BODY = 64 * 1024  # a redirect's or an error's body read to keep its connection open
HEADERS = {"User-Agent": f"kvenv/{__version__}", "Accept-Encoding": "identity"}


class Connections:
    """The pooled HTTP client of one run (made on first use; thread-safe). ``close`` (or use
    as a context manager) when the run is done."""

    def __init__(self, size: int = POOL) -> None:
        self.size = max(size, 1)
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The httpx2 client (a :class:`unearth.fetchers.sync.PyPIClient`)."""
        with self._lock:
            if self._client is None:
                from kvenv.lock.pages import new_session

                self._client = new_session(connections=self.size)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> Connections:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _content_length(value: str | None) -> int | None:
    """A Content-Length header's value; None when absent or not ASCII digits ("²" is a digit
    to ``str.isdigit`` but not to ``int``)."""
    return int(value) if value and value.isascii() and value.isdigit() else None


# Called as ``progress(done, total)``: the bytes received so far and the expected size.
ByteProgress = Callable[[int, int | None], None]


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
    """Stream ``url`` into ``sink`` over ``connections`` (None: a client of its own, closed
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
    import httpx2  # imported with the client

    shown = redact_url(url)
    try:
        response = _open(connections.client(), url, timeout)
        try:
            _stream(response, sink, shown, size=size, cancel=cancel, progress=progress)
        finally:
            response.close()
    except httpx2.TimeoutException:
        raise TransientFetchError(f"download failed: timed out for {shown}") from None
    except httpx2.RemoteProtocolError:
        raise TransientFetchError(
            f"download failed: connection closed after {sink.size} bytes for {shown}"
        ) from None
    except httpx2.TransportError as exc:
        raise TransientFetchError(f"download failed: {_reason(exc)} for {shown}") from None
    except (httpx2.HTTPError, httpx2.InvalidURL, UnicodeError) as exc:  # a URL it cannot ask
        raise FetchError(f"download failed: {_reason(exc)} for {shown}") from None


def _open(client: Any, url: str, timeout: float) -> Any:
    """The response to ``GET url`` with its body not read yet, redirects followed within the
    policy; an HTTP error status raised as a :class:`FetchError`."""
    request = client.build_request("GET", url, headers=HEADERS, timeout=timeout)
    for _ in range(MAX_REDIRECTS + 1):
        response = client.send(request, stream=True, follow_redirects=False)
        if not response.has_redirect_location:
            break
        _finish(response)
        following = response.next_request
        if following is None:  # a Location that is not a URL
            raise FetchError(
                f"download failed: {redact_url(str(request.url))} redirects to an invalid URL"
            )
        target = str(following.url)
        try:
            check_url(target, what="redirect to")
        except FetchError:
            raise FetchError(
                f"refusing redirect from {redact_url(str(request.url))} to "
                f"{redact_url(target)}: only https:// is allowed",
                hint="the server redirects to an insecure location; nothing was downloaded",
            ) from None
        request = following
    else:
        response.close()
        raise FetchError(
            f"download failed: more than {MAX_REDIRECTS} redirects for {redact_url(url)}"
        )
    status = int(response.status_code)
    if status >= 400:
        _finish(response)
        cls = TransientFetchError if status >= 500 or status in (408, 429) else FetchError
        raise cls(f"download failed: HTTP {status} {response.reason_phrase} for {redact_url(url)}")
    return response


def _finish(response: Any) -> None:
    """Close ``response``, reading a small body first so its connection can be reused."""
    length = _content_length(response.headers.get("Content-Length"))
    if length is not None and length <= SMALL_BODY:
        response.read()
    response.close()


def _stream(
    response: Any,
    sink: HashingWriter,
    shown: str,
    *,
    size: int | None,
    cancel: threading.Event | None,
    progress: ByteProgress | None,
) -> None:
    """The body of ``response``, raw, into ``sink``, checked against its announced length."""
    announced = _content_length(response.headers.get("Content-Length"))
    total = announced if announced is not None else size
    if size is not None and announced is not None and announced != size:
        raise size_mismatch(shown, size, announced)
    pending: list[bytes] = []
    held = 0
    for piece in response.iter_raw():
        if cancel is not None and cancel.is_set():
            raise Cancelled(f"download of {shown} cancelled")
        pending.append(piece)
        held += len(piece)
        if held >= WRITE_BYTES:
            sink.write(b"".join(pending))
            pending.clear()
            held = 0
            if progress is not None:
                progress(sink.size, total)
    if cancel is not None and cancel.is_set():
        raise Cancelled(f"download of {shown} cancelled")
    if pending:
        sink.write(b"".join(pending))
        if progress is not None:
            progress(sink.size, total)
    if announced is not None and sink.size < announced:
        raise TransientFetchError(
            f"download failed: connection closed after {sink.size} of {announced} bytes for {shown}"
        )


def _reason(exc: Exception) -> str:
    """What went wrong on the connection, without any URL in it."""
    from kvenv.lock.pages import without_urls

    text = without_urls(str(exc)).strip()
    return text or type(exc).__name__
