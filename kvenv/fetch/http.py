"""Plain https downloads (URL sources and wheels from the lock), with urllib.

Policy (:func:`kvenv._util.urls.check_url`): only ``https://`` URLs are fetched, and every
redirect target is checked by the same rule (a redirect to ``http://`` stops the download).
Certificates are verified by the default SSL context, every socket operation has a timeout,
and requests carry ``User-Agent: kvenv/<version>`` and ``Accept-Encoding: identity`` (the bytes
hashed are the bytes served). URLs in messages are redacted
(:func:`kvenv._util.redact.redact_url`): no user-info, no query string.
"""

from __future__ import annotations

import http.client
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import IO

from kvenv import __version__
from kvenv._util.hashing import CHUNK, HashingWriter, size_mismatch
from kvenv._util.redact import redact_url
from kvenv._util.urls import check_url
from kvenv.errors import Cancelled, FetchError, TransientFetchError

DEFAULT_TIMEOUT = 60.0


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
                f"refusing redirect from {redact_url(req.full_url)} to {redact_url(newurl)}: "
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
) -> None:
    """Stream ``url`` into ``sink``. The caller checks the digest (``sink.check``)."""
    check_url(url)
    request = urllib.request.Request(
        url,
        headers={"User-Agent": f"kvenv/{__version__}", "Accept-Encoding": "identity"},
    )
    shown = redact_url(url)
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
