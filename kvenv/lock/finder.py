"""Finding wheels for the target on indexes and in wheelhouses, through unearth.

unearth parses the pages (PEP 503 HTML and PEP 691 JSON) and filters links (wheels only,
yanked excluded, name checked); kvenv ranks the wheel tags for the *target* (never the running
machine), checks ``Requires-Python`` against the target's Python, applies ``--exclude-newer``,
and caches the pages through :mod:`kvenv.lock.pages` (fresh for ten minutes, then
revalidated; used as they are with ``--offline``). Pages are fetched in parallel: the
resolver prefetches the projects it will need next.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlparse

import attrs
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kvenv.errors import FetchError
from kvenv.lock.cache import CachedPage, IndexCache
from kvenv.lock.jobs import Claimable
from kvenv.lock.pages import JSON_PAGE, Found, Pages, new_session
from kvenv.lock.pagescan import absolute_url, page_files
from kvenv.lock.sources import IndexConfig
from kvenv.model.target import TargetEnv


@attrs.frozen
class WheelFile:
    """One wheel that installs on the target."""

    name: NormalizedName
    version: Version
    filename: str
    url: str
    rank: int
    index: str | None = None  # the index it came from; None for a wheelhouse
    sha256: str | None = None
    size: int | None = None
    upload_time: datetime | None = None
    requires_python: str | None = None
    core_metadata: bool = False
    core_metadata_sha256: str | None = None

    @property
    def local_path(self) -> Path | None:
        parsed = urlparse(self.url)
        return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


@attrs.frozen
class Project:
    """The wheels of one project for the target, and every file name its sources list."""

    name: NormalizedName
    wheels: tuple[WheelFile, ...]
    filenames: tuple[str, ...] = ()

    @property
    def seen_versions(self) -> tuple[str, ...]:
        """Every version seen at all (any platform, sdists too), newest first."""
        seen: set[str] = set()
        for filename in self.filenames:
            seen.update(_any_version(self.name, filename))
        return tuple(sorted(seen, key=_version_key, reverse=True))

    def by_version(self) -> dict[Version, WheelFile]:
        """The best wheel for each version, newest version first."""
        best: dict[Version, WheelFile] = {}
        for wheel in sorted(self.wheels, key=lambda w: (w.rank, w.filename)):
            best.setdefault(wheel.version, wheel)
        return dict(sorted(best.items(), key=lambda item: item[0], reverse=True))


class Finder:
    """Finds the target's wheels of a project on every configured source."""

    def __init__(
        self,
        config: IndexConfig,
        target: TargetEnv,
        cache: IndexCache,
        *,
        offline: bool = False,
        refresh: bool = False,
        exclude_newer: datetime | None = None,
        workers: int = 16,
    ) -> None:
        self.config = config
        self.target = target
        self.cache = cache
        self.offline = offline
        self.refresh = refresh
        self.exclude_newer = exclude_newer
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvenv-find")
        self._projects: dict[str, Claimable[Project]] = {}
        self._lock = threading.Lock()
        self._session: Any = None
        self._link_pages: dict[str, Future[list[_Entry]]] = {}
        self._ranks: dict[tuple[str, str, str], int] | None = None
        # memos shared by the page workers (a lost race only computes an entry twice)
        self._tag_rank_memo: dict[str, int | None] = {}
        self._name_memo: dict[str, NormalizedName] = {}
        self._session_lock = threading.Lock()
        self._tags_digest: str | None = None
        self.scan_pages = True  # PEP 691 pages through kvenv.lock.pagescan (False: json.loads)
        self.index_urls = config.index_urls()
        self._pages = Pages(cache, lambda: self.session, offline=offline, refresh=refresh)

    # the HTTP session ----------------------------------------------------------------------
    @property
    def session(self) -> Any:
        with self._session_lock:
            if self._session is None:
                self._session = new_session()
            return self._session

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._session is not None:
            self._session.close()

    # public API ----------------------------------------------------------------------------
    def prefetch(self, names: Iterable[str]) -> None:
        for name in names:
            self._job(canonicalize_name(name))

    def project(self, name: str) -> Project:
        return self._job(canonicalize_name(name)).result()

    def _job(self, name: NormalizedName) -> Claimable[Project]:
        job = self._projects.get(name)  # a dict read is atomic: no lock on the hot path
        if job is not None:
            return job
        with self._lock:
            job = self._projects.get(name)
            fresh = job is None
            if job is None:
                job = self._projects[name] = Claimable(lambda: self._collect(name))
        if fresh:  # submitted outside the lock (it may start a thread)
            with contextlib.suppress(RuntimeError):  # shut down: whoever asks runs it
                job.submit_to(self._pool)
        return job

    # collecting ----------------------------------------------------------------------------
    def _collect(self, name: NormalizedName) -> Project:
        wheels: list[WheelFile] = []
        filenames: list[str] = []
        for index in self.index_urls:
            url = urljoin(index, f"{name}/")
            found = self._page(url)
            if found is None:
                continue
            if found.head.content_type.startswith(JSON_PAGE):
                self._json_page(name, index, found, wheels, filenames)
            else:
                entries = _entries(_as_page(found.page()), index)
                wheels.extend(self._wheels(name, entries))
                filenames.extend(e.filename for e in entries)
        for location in self.config.find_links:
            entries = self._find_links(location)
            wheels.extend(self._wheels(name, entries))
            filenames.extend(e.filename for e in entries)
        wheels.sort(key=lambda w: (w.version, -w.rank, w.filename), reverse=True)
        return Project(name, tuple(wheels), tuple(filenames))

    def _json_page(
        self,
        name: NormalizedName,
        index: str,
        found: Found,
        wheels: list[WheelFile],
        filenames: list[str],
    ) -> None:
        """A PEP 691 page's target wheels: from its parsed form when the cache holds one made
        from the same bytes for the same target, else parsed now and the parsed form kept."""
        url = found.head.url
        key = self._parse_key(name, index)
        sha256 = found.head.sha256
        if sha256 is not None:
            kept = _decode_parsed(self.cache.get_parsed(url, key, sha256), name, index)
            if kept is not None:
                wheels.extend(kept[1])
                filenames.extend(kept[0])
                return
        page = found.page()
        mine: list[WheelFile] = []
        names: list[str] = []
        self._evaluate_json(name, page, index, mine, names)
        if sha256 is None:  # an entry from before heads recorded the digest: record it now
            sha256 = hashlib.sha256(page.content).hexdigest()
            self.cache.put_head(attrs.evolve(found.head, sha256=sha256))
        self.cache.put_parsed(url, key, sha256, _encode_parsed(names, mine))
        wheels.extend(mine)
        filenames.extend(names)

    def _parse_key(self, name: NormalizedName, index: str) -> str:
        """Everything a page's parsed form depends on besides its bytes."""
        if self._tags_digest is None:
            ranked = "\n".join(f"{i}-{a}-{p}" for (i, a, p) in self._tag_ranks)
            self._tags_digest = hashlib.sha256(ranked.encode()).hexdigest()
        newer = self.exclude_newer.isoformat() if self.exclude_newer else None
        python = self.target.python_full_version
        return json.dumps([PARSED_FORMAT, name, index, python, newer, self._tags_digest])

    def _evaluate_json(
        self,
        name: NormalizedName,
        page: CachedPage,
        index: str,
        wheels: list[WheelFile],
        filenames: list[str],
    ) -> None:
        """A PEP 691 page read straight into the target's wheels: the cheap tests (suffix,
        yanked, tags, name) come first, so the many files that cannot install on the target
        cost no more than a few string operations (issue 13; the same checks as
        :meth:`_wheels`, in the same terms)."""
        base = page.url
        scanned, files = page_files(
            page.content,
            base,
            lambda filename: self._tag_rank(name, filename) is not None,
            scan=self.scan_pages,
        )
        if scanned is not None:
            filenames.extend(scanned)
        python = self.target.python_full_version
        specs: dict[str, bool] = {}
        for file in files:
            if not isinstance(file, dict):
                continue
            raw_url = file.get("url")
            raw_name = file.get("filename")
            if not raw_url or not raw_name:
                continue
            filename = str(raw_name)
            if scanned is None:
                filenames.append(filename)
            if file.get("yanked"):
                continue
            rank = self._tag_rank(name, filename)
            if rank is None:
                continue
            rp = file.get("requires-python") or None
            if rp and not _python_ok(rp, specs, python):
                continue
            upload = _when(file.get("upload-time"))
            if self.exclude_newer and upload and upload > self.exclude_newer:
                continue
            version = _version_of(name, filename)
            if version is None:
                continue
            hashes = file.get("hashes") or {}
            meta = file.get("core-metadata", file.get("data-dist-info-metadata"))
            size = file.get("size")
            wheels.append(
                WheelFile(
                    name=name,
                    version=version,
                    filename=filename,
                    url=absolute_url(base, str(raw_url)),
                    rank=rank,
                    index=index,
                    sha256=hashes.get("sha256") if isinstance(hashes, dict) else None,
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    upload_time=upload,
                    requires_python=rp,
                    core_metadata=bool(meta),
                    core_metadata_sha256=meta.get("sha256") if isinstance(meta, dict) else None,
                )
            )

    def _tag_rank(self, name: NormalizedName, filename: str) -> int | None:
        """The target's rank of a wheel of project ``name`` by its file name alone (None: not
        a wheel of ``name``, or not one that installs on the target)."""
        if not filename.endswith(".whl"):
            return None
        head, _, tail = filename[:-4].partition("-")  # tail: version[-build]-py-abi-plat
        memo = self._tag_rank_memo
        key = tail[tail.rfind("-", 0, tail.rfind("-", 0, tail.rfind("-"))) + 1 :]
        if key in memo:
            rank = memo[key]
        else:
            parts = filename[:-4].rsplit("-", 3)
            rank = None if len(parts) != 4 else _rank(parts[1], parts[2], parts[3], self._tag_ranks)
            memo[key] = rank
        if rank is None:
            return None
        project = head
        canonical = self._name_memo.get(project)
        if canonical is None:
            canonical = self._name_memo[project] = canonicalize_name(project)
        return rank if canonical == name else None

    def _wheels(self, name: NormalizedName, entries: list[_Entry]) -> list[WheelFile]:
        wheels: list[WheelFile] = []
        ranks = self._tag_ranks
        python = self.target.python_full_version
        specs: dict[str, bool] = {}
        for entry in entries:
            filename = entry.filename
            if entry.yanked or not entry.url or not filename.endswith(".whl"):
                continue
            parts = filename[:-4].rsplit("-", 3)
            if len(parts) != 4 or canonicalize_name(parts[0].split("-", 1)[0]) != name:
                continue
            rank = _rank(parts[1], parts[2], parts[3], ranks)
            if rank is None:
                continue
            rp = entry.requires_python
            if rp and not _python_ok(rp, specs, python):
                continue
            upload = _when(entry.upload_time)
            if self.exclude_newer and upload and upload > self.exclude_newer:
                continue
            version = _version_of(name, filename)
            if version is None:
                continue
            wheels.append(
                WheelFile(
                    name=name,
                    version=version,
                    filename=filename,
                    url=entry.url,
                    rank=rank,
                    index=entry.index,
                    sha256=entry.sha256,
                    size=entry.size,
                    upload_time=upload,
                    requires_python=rp,
                    core_metadata=entry.core_metadata,
                    core_metadata_sha256=entry.core_metadata_sha256,
                )
            )
        return wheels

    @property
    def _tag_ranks(self) -> dict[tuple[str, str, str], int]:
        if self._ranks is None:
            self._ranks = {
                (t.interpreter, t.abi, t.platform): i for i, t in enumerate(self.target.tags())
            }
        return self._ranks

    def _find_links(self, location: str) -> list[_Entry]:
        with self._lock:
            future = self._link_pages.get(location)
            owner = future is None
            if future is None:
                future = Future()
                self._link_pages[location] = future
        if owner:
            try:
                future.set_result(self._read_find_links(location))
            except BaseException as exc:
                future.set_exception(exc)
        return future.result()

    def _read_find_links(self, location: str) -> list[_Entry]:
        if "://" not in location:
            directory = Path(location)
            if not directory.is_dir():
                raise FetchError(f"find-links directory not found: {location}")
            return [
                _Entry(child.name, child.resolve().as_uri(), size=child.stat().st_size)
                for child in sorted(directory.iterdir())
                if child.suffix == ".whl" and child.is_file()
            ]
        found = self._page(location)
        return [] if found is None else _entries(_as_page(found.page()), None)

    # pages ---------------------------------------------------------------------------------
    def _page(self, url: str) -> Found | None:
        """The page at ``url`` through the page cache (:mod:`kvenv.lock.pages`)."""
        return self._pages.get(url)


PARSED_FORMAT = 1
_Row = tuple[str, str, int, str | None, int | None, str | None, str | None, bool, str | None, str]


def _encode_parsed(filenames: list[str], wheels: list[WheelFile]) -> Any:
    """A page's parsed form as plain data: every file name, and the target's wheels."""
    rows = tuple(
        (
            w.filename,
            w.url,
            w.rank,
            w.sha256,
            w.size,
            w.upload_time.isoformat() if w.upload_time else None,
            w.requires_python,
            w.core_metadata,
            w.core_metadata_sha256,
            str(w.version),
        )
        for w in wheels
    )
    return (tuple(filenames), rows)


def _decode_parsed(
    data: Any, name: NormalizedName, index: str
) -> tuple[list[str], list[WheelFile]] | None:
    """The parsed form back (None when it is not what :func:`_encode_parsed` writes)."""
    if data is None:
        return None
    try:
        names, rows = data
        wheels = []
        for row in rows:
            filename, url, rank, sha256, size, upload, rp, meta, meta_sha, version = row
            wheels.append(
                WheelFile(
                    name=name,
                    version=Version(version),
                    filename=filename,
                    url=url,
                    rank=rank,
                    index=index,
                    sha256=sha256,
                    size=size,
                    upload_time=datetime.fromisoformat(upload) if upload else None,
                    requires_python=rp,
                    core_metadata=meta,
                    core_metadata_sha256=meta_sha,
                )
            )
        return [str(n) for n in names], wheels
    except (TypeError, ValueError, InvalidVersion):
        return None


def _as_page(cached: CachedPage) -> Any:
    from unearth.collector import IndexPage
    from unearth.link import Link

    return IndexPage(Link(cached.url), cached.content, None, cached.content_type)


@attrs.frozen
class _Entry:
    """One file listed by a source (any kind, any platform)."""

    filename: str
    url: str
    index: str | None = None
    sha256: str | None = None
    size: int | None = None
    upload_time: str | datetime | None = None
    yanked: bool = False
    requires_python: str | None = None
    core_metadata: bool = False
    core_metadata_sha256: str | None = None


def _entries(page: Any, index: str | None) -> list[_Entry]:
    """The files of a page: PEP 691 JSON read directly (fast), HTML through unearth."""
    from unearth.collector import parse_html_page

    base = page.link.url_without_fragment
    if page.content_type.startswith("application/vnd.pypi.simple.v1+json"):
        out = []
        for file in page_files(page.content, base, lambda _: True, scan=False)[1]:
            if not isinstance(file, dict) or not file.get("url") or not file.get("filename"):
                continue
            filename = str(file["filename"])
            if not filename.endswith(".whl"):
                out.append(_Entry(filename, ""))
                continue
            hashes = file.get("hashes") or {}
            meta = file.get("core-metadata", file.get("data-dist-info-metadata"))
            size = file.get("size")
            out.append(
                _Entry(
                    filename=filename,
                    url=absolute_url(base, str(file["url"])),
                    index=index,
                    sha256=hashes.get("sha256") if isinstance(hashes, dict) else None,
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    upload_time=file.get("upload-time"),
                    yanked=bool(file.get("yanked")),
                    requires_python=file.get("requires-python") or None,
                    core_metadata=bool(meta),
                    core_metadata_sha256=meta.get("sha256") if isinstance(meta, dict) else None,
                )
            )
        return out
    out = []
    for link in parse_html_page(page):
        meta = link.dist_info_metadata
        sha = (link.hashes or {}).get("sha256") or (
            link.hash if link.hash_name == "sha256" else None
        )
        out.append(
            _Entry(
                filename=link.filename,
                url=link.url_without_fragment,
                index=index,
                sha256=sha,
                yanked=link.yank_reason is not None,
                requires_python=link.requires_python,
                core_metadata=bool(meta),
                core_metadata_sha256=meta.get("sha256") if isinstance(meta, dict) else None,
            )
        )
    return out


def _rank(py: str, abi: str, plat: str, ranks: dict[tuple[str, str, str], int]) -> int | None:
    best: int | None = None
    for p in py.split("."):
        for a in abi.split("."):
            for pl in plat.split("."):
                rank = ranks.get((p, a, pl))
                if rank is not None and (best is None or rank < best):
                    best = rank
    return best


def _python_ok(rp: str, specs: dict[str, bool], python: str) -> bool:
    """Whether a file's ``Requires-Python`` ``rp`` admits the target's ``python`` (``specs``
    keeps each specifier's answer for one page; an invalid one admits nothing)."""
    if rp not in specs:
        try:
            specs[rp] = SpecifierSet(rp).contains(python, prereleases=True)
        except InvalidSpecifier:
            specs[rp] = False
    return specs[rp]


def _when(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _version_of(name: NormalizedName, filename: str) -> Version | None:
    if not filename.endswith(".whl"):
        return None
    try:
        wheel_name, version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return version if wheel_name == name else None


def _any_version(name: NormalizedName, filename: str) -> list[str]:
    if filename.endswith(".whl"):
        version = _version_of(name, filename)
        return [str(version)] if version is not None else []
    try:
        sdist_name, sdist_version = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidVersion):
        return []
    return [str(sdist_version)] if sdist_name == name else []


def _version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")
