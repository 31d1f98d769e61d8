"""The real universe: a :class:`Finder` for wheels and a :class:`MetadataFetcher` for their
metadata, with parallel prefetching (the projects and metadata the resolver will ask for next
are fetched while it works) and digest completion for the chosen wheels."""

from __future__ import annotations

import threading
from collections.abc import Sequence
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
from kvenv.lock.metadata import DistMetadata, MetadataFetcher


class IndexUniverse:
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
        self._meta: dict[str, Future[DistMetadata]] = {}
        self._lock = threading.Lock()
        self._wanted: set[tuple[str, str]] = set()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.finder.close()

    def __enter__(self) -> IndexUniverse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Universe protocol ---------------------------------------------------------------------
    def versions(self, name: NormalizedName) -> Sequence[WheelFile]:
        return list(self.finder.project(name).by_version().values())

    def seen_versions(self, name: NormalizedName) -> Sequence[str]:
        return self.finder.project(name).seen_versions

    def metadata(self, wheel: WheelFile) -> DistMetadata:
        return self._meta_future(wheel).result()

    def _meta_future(self, wheel: WheelFile) -> Future[DistMetadata]:
        with self._lock:
            future = self._meta.get(wheel.url)
            if future is None:
                future = self._pool.submit(self.fetcher.get, wheel)
                self._meta[wheel.url] = future
            return future

    def prefetch(self, wanted: Sequence[tuple[NormalizedName, SpecifierSet]]) -> None:
        fresh = []
        with self._lock:
            for name, spec in wanted:
                key = (name, str(spec))
                if key not in self._wanted:
                    self._wanted.add(key)
                    fresh.append((name, spec))
        self.finder.prefetch(name for name, _ in fresh)
        for name, spec in fresh:
            self._pool.submit(self._prefetch_best, name, spec)

    def _prefetch_best(self, name: NormalizedName, spec: SpecifierSet) -> None:
        versions = self.finder.project(name).by_version()
        preferred = self.prefer.get(name)
        if preferred in versions and spec.contains(preferred, prereleases=True):
            best = versions[preferred]
        else:
            allowed = list(spec.filter(versions))
            if not allowed:
                return
            best = versions[allowed[0]]
        self._meta_future(best)

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
