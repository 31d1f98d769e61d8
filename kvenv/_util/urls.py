"""The URL policy: which URLs kvenv may fetch, or accept in a lock, at all.

Only ``https://`` URLs with a host pass :func:`check_url`; everything else (plain http, file,
ftp, a URL without a host or with a bad port) is refused with a :class:`FetchError` that shows
the URL redacted. Nothing here makes a request.

:func:`allow_loopback_http` is a seam for kvenv's own tests only: while it is active, plain
``http://`` to a loopback address (127.0.0.1, ::1) is allowed, nothing else. No flag,
environment variable or configuration turns it on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

from kvenv._util.redact import redact_url
from kvenv.errors import FetchError

__all__ = ["allow_loopback_http", "check_url", "loopback_http_allowed"]

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1"})

_loopback_lock = threading.Lock()
_loopback_depth = 0


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
    """Whether the test-only loopback seam is active."""
    return _loopback_depth > 0


def check_url(url: str, *, what: str = "URL") -> None:
    """Raise :class:`FetchError` unless ``url`` may be fetched under the https-only policy."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises ValueError for a bad port
    except ValueError:
        raise FetchError(f"refusing {what} {redact_url(url)}: not a valid URL") from None
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and host in _LOOPBACK_HOSTS and loopback_http_allowed():
        return
    raise FetchError(
        f"refusing {what} {redact_url(url)}: only https:// URLs are allowed",
        hint="pin an https:// URL; plain http and other schemes are never fetched",
    )
