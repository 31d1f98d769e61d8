"""The real universe: a :class:`Finder` for wheels and a :class:`MetadataFetcher` for their
metadata, with parallel prefetching and digest completion for the chosen wheels.

Prefetching runs ahead of the resolver: when a project is wanted, its page is fetched and then
the metadata of its likely candidate (the preferred pin when it fits, else the newest allowed
version); once that metadata is parsed, the requirements it names for the target (given by the
resolver's ``follow`` function) are wanted in turn. So the pages and metadata of the whole
closure of likely candidates are in flight at once, instead of one dependency level per round
trip. The work is bounded: one metadata file per wanted (project, specifier), never every
version, and each (project, specifier) once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import attrs
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName
from packaging.version import Version

from kvenv._util.hashing import sha256_file
from kvenv._util.redact import redact_url
from kvenv.errors import FetchError
from kvenv.lock.cache import IndexCache
from kvenv.lock.finder import Finder, WheelFile
from kvenv.lock.jobs import Claimable
from kvenv.lock.metadata import DistMetadata, MetadataFetcher

Wanted = Sequence[tuple[NormalizedName, SpecifierSet]]


class IndexUniverse:
    """The universe over the configured sources, prefetching ahead of the resolver."""

    def __init__(
        self,
        finder: Finder,
        *,
        prefer: dict[NormalizedName, Version] | None = None,
        workers: int = 16,
    ) -> None:
        self.finder = finder
        self.cache: IndexCache = finder.cache
        self.fetcher = MetadataFetcher(finder.cache, lambda: finder.session, offline=finder.offline)
        self.prefer = prefer or {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvenv-meta")
        self._meta: dict[str, Claimable[DistMetadata]] = {}
        self._lock = threading.Lock()
        self._wanted: set[tuple[str, str]] = set()
        self._versions: dict[NormalizedName, list[WheelFile]] = {}
        self._follow: Callable[[DistMetadata], Wanted] | None = None
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        # speculative work not yet started is dropped; what runs finishes
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.finder.close()

    def __enter__(self) -> IndexUniverse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Universe protocol ---------------------------------------------------------------------
    def versions(self, name: NormalizedName) -> Sequence[WheelFile]:
        known = self._versions.get(name)
        if known is None:
            known = list(self.finder.project(name).by_version().values())
            self._versions[name] = known
        return known

    def seen_versions(self, name: NormalizedName) -> Sequence[str]:
        return self.finder.project(name).seen_versions

    def metadata(self, wheel: WheelFile) -> DistMetadata:
        return self._meta_job(wheel).result()

    def _meta_job(self, wheel: WheelFile) -> Claimable[DistMetadata]:
        job = self._meta.get(wheel.url)  # a dict read is atomic: no lock on the hot path
        if job is not None:
            return job
        with self._lock:
            job = self._meta.get(wheel.url)
            fresh = job is None
            if job is None:
                job = self._meta[wheel.url] = Claimable(lambda: self.fetcher.get(wheel))
            closed = self._closed
        if fresh and not closed:  # submitted outside the lock (it may start a thread)
            with contextlib.suppress(RuntimeError):  # shut down: whoever asks runs it
                job.submit_to(self._pool)
        return job

    def follow(self, wanted_by: Callable[[DistMetadata], Wanted]) -> None:
        """Follow prefetched metadata: ``wanted_by(metadata)`` names the requirements whose
        pages and likely metadata to prefetch next (the resolver's policy decides which)."""
        self._follow = wanted_by

    def prefetch(self, wanted: Wanted) -> None:
        keyed = [((name, str(spec)), name, spec) for name, spec in wanted]
        fresh = []
        with self._lock:
            if self._closed:
                return
            for key, name, spec in keyed:
                if key not in self._wanted:
                    self._wanted.add(key)
                    fresh.append((name, spec))
        if not fresh:
            return
        try:
            self.finder.prefetch(name for name, _ in fresh)
            for name, spec in fresh:
                self._pool.submit(self._prefetch_best, name, spec)
        except RuntimeError:  # shut down while following: the lock is done
            return

    def _prefetch_best(self, name: NormalizedName, spec: SpecifierSet) -> None:
        try:
            versions = self.finder.project(name).by_version()
        except Exception:  # the resolver meets the same error when it asks, and reports it
            return
        preferred = self.prefer.get(name)
        if preferred in versions and spec.contains(preferred, prereleases=True):
            best = versions[preferred]
        else:
            allowed = list(spec.filter(versions))
            if not allowed:
                return
            best = versions[allowed[0]]
        job = self._meta_job(best)
        if self._follow is not None:
            job.future.add_done_callback(self._followed)

    def _followed(self, future: Future[DistMetadata]) -> None:
        follow = self._follow
        if follow is None or future.cancelled() or future.exception() is not None:
            return
        try:
            wanted = follow(future.result())
        except Exception:  # a bad requirement is the resolver's to report, when it gets there
            return
        self.prefetch(wanted)

    def complete(self, wheels: Sequence[WheelFile]) -> list[WheelFile]:
        futures = [self._pool.submit(self._complete_one, w) for w in wheels]
        return [f.result() for f in futures]

    # digests -------------------------------------------------------------------------------
    def _complete_one(self, wheel: WheelFile) -> WheelFile:
        if wheel.sha256 and wheel.size is not None:
            return wheel
        local = wheel.local_path
        if local is not None:
            stat = local.stat()
            key = f"{local}:{stat.st_size}:{stat.st_mtime_ns}"
            known = self.cache.get_digest(key)
            if known is None:
                known = sha256_file(local)
                self.cache.put_digest(key, *known)
            sha, size = known
            if wheel.sha256 and wheel.sha256 != sha:
                raise FetchError(f"{local} does not match the sha256 its page gives")
            return attrs.evolve(wheel, sha256=sha, size=size)
        known = self.cache.get_digest(wheel.url)
        if known is None:
            if self.finder.offline:
                raise FetchError(
                    f"offline: the size or sha256 of {wheel.filename} is not cached",
                    hint="run `kvenv lock` once with network access",
                )
            known = self._download_digest(wheel)
            self.cache.put_digest(wheel.url, *known)
        sha, size = known
        if wheel.sha256 and wheel.sha256 != sha:
            raise FetchError(f"{redact_url(wheel.url)} does not match the sha256 its index gives")
        return attrs.evolve(wheel, sha256=sha, size=size)

    def _download_digest(self, wheel: WheelFile) -> tuple[str, int]:
        import hashlib

        session = self.finder.session
        digest = hashlib.sha256()
        size = 0
        try:
            with session.stream("GET", wheel.url, follow_redirects=True) as response:
                if response.status_code != 200:
                    raise FetchError(
                        f"{redact_url(wheel.url)} answered HTTP {response.status_code}"
                    )
                for chunk in response.iter_bytes(1 << 20):
                    digest.update(chunk)
                    size += len(chunk)
        except FetchError:
            raise
        except Exception as exc:
            raise FetchError(f"cannot download {redact_url(wheel.url)}: {exc}") from None
        return digest.hexdigest(), size
