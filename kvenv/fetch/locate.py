"""Where a portable lock's wheels are on the configured indexes: one page per project, in
parallel, through the page cache that ``kvenv lock`` fills (:mod:`kvenv.lock.pages`).

A lock pins each wheel by exact file name and sha256, so nothing about the wheel is chosen
here: the project's page is read for the one file of that name. The page is asked for in PEP
691 JSON form (an index without it answers PEP 503 HTML, read through unearth's parser); a
JSON page is not parsed whole: :func:`kvenv.lock.pagescan.scan_files` decodes only the file
object of that name. Pages come from the cache while fresh, else are revalidated with their
``ETag``/``Last-Modified`` (an unchanged page costs a 304), so a project is asked for at most
once per run however many of its wheels are wanted, and ``prefetch`` asks for every project
at once before the downloads need them.

Indexes are tried in order, then find-links (a directory: the file of that name in it; a URL:
its HTML page). A file whose published sha256 is the pin wins at once; one that publishes
none is used when nothing better is found (the download is verified against the pin like
every artifact); one that publishes another sha256 is an :class:`IntegrityError` when no
source has the pinned file.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import attrs
from packaging.utils import canonicalize_name

from kvenv._util.redact import redact_url
from kvenv._util.urls import check_url
from kvenv.errors import FetchError, IntegrityError
from kvenv.fetch.http import Connections
from kvenv.lock.cache import IndexCache
from kvenv.lock.pages import Found, Pages
from kvenv.lock.pagescan import absolute_url, page_files

WORKERS = 16  # page requests in flight at once (small responses: latency-bound)


@attrs.frozen
class FileListing:
    """One file of the wanted name as a source lists it."""

    location: str | Path  # an https URL, or a local file
    sha256: str | None  # the digest the source publishes (None: none)


class Locator:
    """Finds portable-lock wheels on ``index_urls`` and ``find_links`` (see the module's
    docstring); thread-safe. Pages are asked for over ``connections`` (the run's downloads
    share them; None: a pool of its own); ``offline``: only the page cache is read.
    ``close`` when done."""

    def __init__(
        self,
        index_urls: Sequence[str],
        find_links: Sequence[str],
        cache: IndexCache,
        *,
        workers: int = WORKERS,
        connections: Connections | None = None,
        offline: bool = False,
    ) -> None:
        for url in index_urls:
            check_url(url, what="index URL")
        for location in find_links:
            if "://" in location and not location.startswith("file://"):
                check_url(location, what="find-links URL")
        self.index_urls = tuple(index_urls)
        self.find_links = tuple(find_links)
        self._pages = Pages(cache, self._session, offline=offline)  # offline: cached pages only
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvenv-locate")
        self._jobs: dict[str, Future[Found | None]] = {}
        self._lock = threading.Lock()
        self._connections = connections or Connections(workers)
        self._own = connections is None

    def _session(self) -> Any:
        return self._connections.client()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._own:
            self._connections.close()

    # pages, one request each at most -------------------------------------------------------
    def _page(self, url: str) -> Future[Found | None]:
        with self._lock:
            job = self._jobs.get(url)
            if job is None:
                job = self._jobs[url] = self._pool.submit(self._pages.get, url)
        return job

    def prefetch(self, names: Iterable[str]) -> None:
        """Ask the first index for the page of every project in ``names`` now, in parallel
        (the other sources are asked only for a file the first one lacks)."""
        if self.index_urls:
            for name in names:
                self._page(_project_url(self.index_urls[0], name))

    # locating ------------------------------------------------------------------------------
    def locate(self, name: str, filename: str, sha256: str) -> str | Path:
        """Where ``filename`` of project ``name`` is (an https URL or a local file)."""
        unhashed: FileListing | None = None
        other: str | None = None
        for listed in self._listings(name, filename):
            if listed.sha256 is None:
                unhashed = unhashed or listed
            elif listed.sha256.lower() == sha256:
                return _checked(listed.location)
            else:
                other = other or listed.sha256.lower()
        if unhashed is not None:
            return _checked(unhashed.location)
        where = self._where()
        if other is not None:
            raise IntegrityError(
                f"{where} serves {filename} with sha256 {other}, the lock pins {sha256}",
                hint="the index holds another file under that name: use the index the lock "
                "was made against (--index-url or PIP_INDEX_URL / UV_INDEX_URL), or relock",
            )
        raise FetchError(
            f"{filename} not found on {where}",
            hint="set the index that has it (--index-url, or PIP_INDEX_URL / UV_INDEX_URL), put "
            "the file in the project's wheels/ directory, or use a bundle made with `kvenv "
            "bundle` on a connected machine",
        )

    def _listings(self, name: str, filename: str) -> Iterable[FileListing]:
        """Every listing of ``filename``, source by source, asked for only when needed."""
        for index in self.index_urls:
            found = self._read(self._page(_project_url(index, name)), filename)
            if found is not None:
                yield from _in_page(found, filename)
        for location in self.find_links:
            if "://" not in location or location.startswith("file://"):
                directory = Path(unquote(urlsplit(location).path)) if "://" in location else None
                candidate = (directory or Path(location)) / filename
                if candidate.is_file():
                    yield FileListing(candidate, None)
                continue
            found = self._read(self._page(location), filename)
            if found is not None:
                yield from _in_page(found, filename)

    def _read(self, job: Future[Found | None], filename: str) -> Found | None:
        try:
            return job.result()
        except OSError as exc:  # the page cache could not be written
            raise FetchError(
                f"cannot keep the index page for {filename} in the cache: {exc}",
                hint="check the cache directory (--cache, $KVENV_CACHE_DIR): space, permissions",
            ) from None
        except FetchError as exc:
            raise FetchError(
                f"cannot search {self._where()} for {filename}: {exc.message}",
                hint="check the network and the index URL (--index-url, PIP_INDEX_URL); with "
                "no network, install from a bundle made on a connected machine with "
                "`{kvenv bundle -o kvenv-bundle}`: `{kvenv apply --offline --from kvenv-bundle}`",
            ) from None

    def _where(self) -> str:
        shown = [redact_url(u) for u in self.index_urls]
        shown += [redact_url(f) if "://" in f else f for f in self.find_links]
        return ", ".join(shown) or "no index (none configured)"


def _project_url(index: str, name: str) -> str:
    return urljoin(index if index.endswith("/") else index + "/", f"{canonicalize_name(name)}/")


def _checked(location: str | Path) -> str | Path:
    if isinstance(location, str):
        check_url(location, what="wheel URL")
    return location


def _in_page(found: Found, filename: str) -> list[FileListing]:
    """The listings of ``filename`` on a page: PEP 691 JSON by a scan for that one name (the
    whole page parsed only when the scan cannot vouch for it), else HTML through unearth."""
    page = found.page()
    base = page.url
    if found.is_json:
        return _in_json(page.content, base, filename)
    return _in_html(page, filename)


def _in_json(content: bytes, base: str, filename: str) -> list[FileListing]:
    out = []
    for file in page_files(content, base, lambda name: name == filename)[1]:
        if not isinstance(file, dict) or file.get("filename") != filename:
            continue
        url = file.get("url")
        if not isinstance(url, str) or not url:
            continue
        hashes = file.get("hashes")
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        out.append(FileListing(absolute_url(base, url), sha if isinstance(sha, str) else None))
    return out


def _in_html(page: Any, filename: str) -> list[FileListing]:
    from unearth.collector import IndexPage, parse_html_page
    from unearth.link import Link

    out = []
    html = IndexPage(Link(page.url), page.content, None, page.content_type)
    for link in parse_html_page(html):
        if link.filename != filename:
            continue
        sha = (link.hashes or {}).get("sha256") or (
            link.hash if link.hash_name == "sha256" else None
        )
        if link.is_file:
            out.append(FileListing(Path(link.file_path), sha))
        else:
            out.append(FileListing(str(link.url_without_fragment), sha))
    return out
