"""Index pages over HTTP through the one page cache (:class:`kvenv.lock.cache.IndexCache`),
shared by ``kvenv lock`` (the finder) and ``kvenv apply`` (locating a portable lock's wheels).

A page is asked for in its PEP 691 JSON form first (``Accept`` prefers
``application/vnd.pypi.simple.v1+json``; an index without it answers PEP 503 HTML). A cached
page is used as it is while fresh (:data:`PAGE_TTL` seconds; always with ``offline``), else
revalidated with a conditional request (``If-None-Match``/``If-Modified-Since`` from its
``ETag``/``Last-Modified``): a 304 rewrites only the page's head. A 404 is cached as an empty
page. :class:`Found` reads a cached page's bytes only when they are needed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import attrs

from kvenv._util.redact import redact_url
from kvenv.errors import FetchError
from kvenv.lock.cache import CachedPage, IndexCache, PageHead

PAGE_TTL = 600.0
ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, "
    "text/html; q=0.01"
)
JSON_PAGE = "application/vnd.pypi.simple.v1+json"


def new_session(connections: int = 32) -> Any:
    """The HTTP client for index pages and downloads (unearth's, on httpx2: pooled keep-alive
    connections, at most ``connections`` open at once and kept open between requests,
    compressed transfers, the environment's proxies and certificates)."""
    import httpx2
    from unearth.fetchers.sync import PyPIClient

    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    return PyPIClient(timeout=60.0, limits=limits)


def without_urls(text: str) -> str:
    """``text`` with every URL in it redacted (credentials never reach a message)."""
    return re.sub(r"[a-z][a-z0-9+.-]*://\S+", lambda m: redact_url(m.group(0)), text)


class Pages:
    """The index pages one run reads: from ``cache`` while fresh, else over ``session()``."""

    def __init__(
        self,
        cache: IndexCache,
        session: Callable[[], Any],
        *,
        offline: bool = False,
        refresh: bool = False,
    ) -> None:
        self.cache = cache
        self.session = session
        self.offline = offline
        self.refresh = refresh

    def get(self, url: str, *, cached_ok: bool = True) -> Found | None:
        """The page at ``url`` (None: the index has no such page), from the cache while fresh
        (its bytes read only when needed), else fetched or revalidated."""
        head = self.cache.get_head(url) if cached_ok else None
        if head is not None and (
            self.offline or (not self.refresh and time.time() - head.fetched_at < PAGE_TTL)
        ):
            return None if head.empty else Found(self, head)
        if self.offline:
            raise FetchError(
                f"offline: no cached index page {redact_url(url)}",
                hint="run `kvenv lock` once with network access to fill the cache",
            )
        headers = {"Accept": ACCEPT}
        if head is not None and head.etag:
            headers["If-None-Match"] = head.etag
        if head is not None and head.last_modified:
            headers["If-Modified-Since"] = head.last_modified
        try:
            response = self.session().get(url, headers=headers, follow_redirects=True)
        except Exception as exc:
            detail = f"{type(exc).__name__}: {without_urls(str(exc))}"
            raise FetchError(f"cannot reach {redact_url(url)}: {detail}") from None
        if response.status_code == 304 and head is not None:
            fresh = attrs.evolve(head, fetched_at=time.time())
            self.cache.put_head(fresh)
            return None if fresh.empty else Found(self, fresh)
        if response.status_code == 404:
            self.cache.put_page(CachedPage(url, b"", "text/html", time.time()))
            return None
        if response.status_code >= 400:
            raise FetchError(f"{redact_url(url)} answered HTTP {response.status_code}")
        page = CachedPage(
            url=url,
            content=response.content,
            content_type=response.headers.get("Content-Type", "text/html"),
            fetched_at=time.time(),
            etag=response.headers.get("ETag"),
            last_modified=response.headers.get("Last-Modified"),
        )
        written = self.cache.put_page(page)
        return Found(self, written, page)


class Found:
    """A page the run has: its head, and its bytes (read from the cache on first use)."""

    def __init__(self, pages: Pages, head: PageHead, page: CachedPage | None = None) -> None:
        self.pages = pages
        self.head = head
        self._page = page

    @property
    def is_json(self) -> bool:
        """Whether the page is in PEP 691's JSON form."""
        return self.head.content_type.startswith(JSON_PAGE)

    def page(self) -> CachedPage:
        if self._page is None:
            head = self.head
            body = self.pages.cache.get_body(head.url)
            if body is None:  # the bytes went missing: fetch again (offline: say so)
                again = self.pages.get(head.url, cached_ok=False)
                if again is None:
                    raise FetchError(f"{redact_url(head.url)} is gone from the index")
                return again.page()
            self._page = CachedPage(
                head.url, body, head.content_type, head.fetched_at, head.etag, head.last_modified
            )
        return self._page
