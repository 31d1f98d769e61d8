"""Plain https downloads (URL sources and wheels from the lock), with urllib.

Policy: only ``https://`` URLs are fetched, every redirect target is checked by the same rule
(a redirect to ``http://`` stops the download), certificates are verified by the default SSL
context, every socket operation has a timeout, and requests carry ``User-Agent: kvenv/<version>``
and ``Accept-Encoding: identity`` (the bytes hashed are the bytes served). URLs in messages are
redacted: no user-info, no query string.

:func:`allow_loopback_http` is a seam for kvenv's own tests only: while it is active, plain
``http://`` to a loopback address (127.0.0.1, ::1) is allowed, nothing else. No flag,
environment variable or configuration turns it on.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import IO
from urllib.parse import urlsplit, urlunsplit

from kvenv import __version__
from kvenv._util.hashing import CHUNK, HashingWriter, size_mismatch
from kvenv.errors import FetchError

DEFAULT_TIMEOUT = 60.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1"})

_loopback_lock = threading.Lock()
_loopback_depth = 0


class TransientFetchError(FetchError):
    """A failure worth one more try (connection reset, timeout, 5xx, short read)."""


class Cancelled(FetchError):
    """Stopped on purpose (another download of the same run failed, or an interrupt)."""


@contextlib.contextmanager
def allow_loopback_http() -> Iterator[None]:
    """Test-only: permit ``http://127.0.0.1`` (and ``[::1]``) while the block runs."""
    global _loopback_depth
    with _loopback_lock:
        _loopback_depth += 1
    try:
        yield
    finally:
        with _loopback_lock:
            _loopback_depth -= 1


def loopback_http_allowed() -> bool:
    return _loopback_depth > 0


def redact(url: str) -> str:
    """The URL without credentials, query or fragment (safe for messages and logs)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    query = "…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def check_url(url: str, *, what: str = "URL") -> None:
    """Raise :class:`FetchError` unless ``url`` may be fetched under the https-only policy."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises ValueError for a bad port
    except ValueError:
        raise FetchError(f"refusing {what} {redact(url)}: not a valid URL") from None
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and host in LOOPBACK_HOSTS and loopback_http_allowed():
        return
    raise FetchError(
        f"refusing {what} {redact(url)}: only https:// URLs are allowed",
        hint="pin an https:// URL; plain http and other schemes are never fetched",
    )


class _HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = 10

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            check_url(newurl, what="redirect to")
        except FetchError:
            raise FetchError(
                f"refusing redirect from {redact(req.full_url)} to {redact(newurl)}: "
                "only https:// is allowed",
                hint="the server redirects to an insecure location; nothing was downloaded",
            ) from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _content_length(value: str | None) -> int | None:
    """A Content-Length header's value; None when absent or not ASCII digits ("²" is a digit
    to ``str.isdigit`` but not to ``int``)."""
    return int(value) if value and value.isascii() and value.isdigit() else None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_HttpsOnlyRedirects())


Progress = Callable[[int, int | None], None]


def download(
    url: str,
    sink: HashingWriter,
    *,
    size: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
) -> None:
    """Stream ``url`` into ``sink``. The caller checks the digest (``sink.check``)."""
    check_url(url)
    request = urllib.request.Request(
        url,
        headers={"User-Agent": f"kvenv/{__version__}", "Accept-Encoding": "identity"},
    )
    shown = redact(url)
    try:
        with _opener().open(request, timeout=timeout) as response:
            check_url(response.geturl(), what="redirect to")
            length = response.headers.get("Content-Length")
            announced = _content_length(length)
            total = announced if announced is not None else size
            if size is not None and announced is not None and announced != size:
                raise size_mismatch(shown, size, announced)
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            while True:
                if cancel is not None and cancel.is_set():
                    raise Cancelled(f"download of {shown} cancelled")
                count = response.readinto(buffer)
                if not count:
                    break
                sink.write(view[:count])
                if progress is not None:
                    progress(sink.size, total)
            if announced is not None and sink.size < announced:
                raise TransientFetchError(
                    f"download failed: connection closed after {sink.size} of {announced} "
                    f"bytes for {shown}"
                )
    except urllib.error.HTTPError as exc:
        cls = TransientFetchError if exc.code >= 500 or exc.code in (408, 429) else FetchError
        raise cls(f"download failed: HTTP {exc.code} {exc.reason} for {shown}") from None
    except urllib.error.URLError as exc:
        raise TransientFetchError(f"download failed: {exc.reason} for {shown}") from None
    except (http.client.HTTPException, ConnectionError, TimeoutError) as exc:
        reason = type(exc).__name__
        if isinstance(exc, http.client.IncompleteRead):
            reason = f"connection closed after {sink.size} bytes"
        raise TransientFetchError(f"download failed: {reason} for {shown}") from None
