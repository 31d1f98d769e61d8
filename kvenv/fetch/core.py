"""``fetch_all``: every artifact of an apply, verified, in the content-addressed cache."""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvenv._util.hashing import copy_hashing, size_mismatch, verify_file
from kvenv._util.progress import Progress
from kvenv._util.redact import redact_url
from kvenv.errors import (
    Cancelled,
    FetchError,
    IntegrityError,
    KvenvError,
    Problem,
    TransientFetchError,
    UsageError,
)
from kvenv.fetch.cache import ArtifactCache
from kvenv.fetch.hub import describe, download_hf, hub_offline
from kvenv.fetch.index import find_on_index
from kvenv.model.profile import HfSource, IndexSource, UrlSource
from kvenv.plan.artifacts import Artifact, url_filename, verify_wheel_identity

if TYPE_CHECKING:
    from kvenv.fetch.http import Connections as _Connections
    from kvenv.fetch.locate import Locator as _Locator

ATTEMPTS = 3
MAX_LISTED = 20
BACKOFF_SECONDS = 0.5
OFFLINE_HINT = (
    "on a connected machine run `{kvenv bundle -o kvenv-bundle}`, copy kvenv-bundle here (on "
    "Kaggle: upload it as a dataset) and run `{kvenv apply --offline --from kvenv-bundle}`; or "
    "run without --offline"
)


@attrs.frozen
class LocalFiles:
    """Files already on this machine, by sha256, whose bytes their owner verified (an opened
    bundle: :meth:`kvenv.fetch.bundle.BundleInfo.local_files`); ``where`` names them."""

    where: Path
    files: Mapping[str, Path]


def fetch_all(
    artifacts: Iterable[Artifact],
    *,
    cache: Path,
    offline: bool = False,
    bundle: LocalFiles | None = None,
    jobs: int = 8,
    progress: Progress | None = None,
    index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    rehash_cached: bool = False,
    timeout: float | None = None,
    on_ready: Callable[[str, Path], None] | None = None,
) -> dict[str, Path]:
    """Return ``{sha256: verified file}`` for every artifact, downloading what is missing.

    Files come from the cache (re-verified cheaply, see :mod:`kvenv.fetch.cache`), then from
    ``bundle`` (used in place, after its SHA256SUMS were checked), then from their sources,
    ``jobs`` at a time. A portable lock's wheel (``index_fallback``) whose path does not exist
    is found on the index by file name: ``index_urls``/``find_links`` when given, else the
    index environment variables ``kvenv lock`` honours, else unearth's default index.
    With ``offline`` or a ``bundle`` nothing touches the network, and a
    missing artifact is a :class:`FetchError` naming each one. A file whose sha256 or size
    differs from its pin is deleted and raises :class:`IntegrityError`; no result is
    returned then. ``progress(label, done_bytes, total_bytes)`` is called from worker threads.
    A download waits ``timeout`` seconds at most for each read (None: the HTTP client's
    default, :data:`kvenv.fetch.http.DEFAULT_TIMEOUT`).

    Downloads start largest first (the longest ones overlap the most of the rest). Each
    file is handed to ``on_ready(sha256, path)`` as soon as it is verified (a cached or
    bundled one at once, a download when it is complete, from its worker thread), so the
    caller can unpack it while the others still download.
    """
    if jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    wanted = _dedupe(artifacts)
    store = ArtifactCache(cache)
    store.prepare()
    bundled = bundle.files if bundle is not None else {}
    results: dict[str, Path] = {}
    pending: list[Artifact] = []
    for artifact in wanted:
        _safe_filename(artifact.filename, artifact)
        hit = store.lookup(
            artifact.sha256, artifact.size, artifact.filename, rehash=rehash_cached
        ) or bundled.get(artifact.sha256)
        if hit is not None:
            results[artifact.sha256] = hit
            if on_ready is not None:
                on_ready(artifact.sha256, hit)
            if progress is not None:
                size = hit.stat().st_size
                progress(artifact.label, size, size)
        else:
            pending.append(artifact)
    _refuse_network(pending, offline=offline, bundle=bundle)
    pending.sort(key=lambda a: -(a.size or 0))  # stable: the lock's order among equals
    results.update(
        _fetch_parallel(
            pending,
            store,
            jobs=jobs,
            progress=progress,
            index_urls=index_urls,
            find_links=find_links,
            timeout=timeout,
            on_ready=on_ready,
        )
    )
    for artifact in wanted:
        if artifact.role == "native":  # the declared identity, before anything is installed
            verify_wheel_identity(artifact, results[artifact.sha256])
    return results


def _dedupe(artifacts: Iterable[Artifact]) -> list[Artifact]:
    seen: dict[str, Artifact] = {}
    for artifact in artifacts:
        sha = artifact.sha256.lower()
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise IntegrityError(f"{artifact.label}: {artifact.sha256!r} is not a sha256")
        other = seen.get(sha)
        if other is None:
            seen[sha] = artifact if sha == artifact.sha256 else attrs.evolve(artifact, sha256=sha)
        elif artifact.size is not None and other.size is not None and artifact.size != other.size:
            raise IntegrityError(
                f"{artifact.label} and {other.label} pin the same sha256 with different sizes"
            )
    return list(seen.values())


def _safe_filename(filename: str | None, artifact: Artifact) -> None:
    if filename is None:
        return
    if (
        not filename.endswith(".whl")
        or filename != os.path.basename(filename)
        or "\\" in filename
        or filename.startswith(".")
        or "\x00" in filename
    ):
        raise IntegrityError(
            f"refusing artifact file name {filename!r} of {artifact.name}: "
            "a wheel file name without directories is required"
        )


def source_text(artifact: Artifact) -> str:
    source = artifact.source
    if isinstance(source, HfSource):
        return f"Hugging Face {describe(source)}"
    if isinstance(source, UrlSource):
        return redact_url(source.url)
    if isinstance(source, IndexSource):
        return f"index {redact_url(source.index_url)}" if source.index_url else "the index"
    if isinstance(source, Path):
        return str(source)
    return redact_url(source)


def _is_hub(artifact: Artifact) -> bool:
    return isinstance(artifact.source, HfSource)


def _needs_network(artifact: Artifact) -> bool:
    return not isinstance(artifact.source, Path) or _located(artifact)


def _located(artifact: Artifact) -> bool:
    """Whether the artifact is a portable lock's wheel to be found on the index: its file is
    not at the lock's path."""
    source = artifact.source
    return isinstance(source, Path) and artifact.index_fallback and not source.is_file()


def _where(artifact: Artifact) -> str:
    if isinstance(artifact.source, Path):  # a portable lock's wheel that is not there
        return f"the index ({artifact.source} does not exist)"
    return source_text(artifact)


def _refuse_network(pending: list[Artifact], *, offline: bool, bundle: LocalFiles | None) -> None:
    remote = [a for a in pending if _needs_network(a)]
    if not remote:
        return
    problems = [
        Problem(
            f"{a.label} ({a.role}, sha256 {a.sha256[:12]}…) from {_where(a)}",
            fix="add it to the bundle" if bundle is not None else None,
        )
        for a in remote
    ]
    if len(problems) > MAX_LISTED:
        hidden = len(problems) - MAX_LISTED
        problems = [*problems[:MAX_LISTED], Problem(f"… and {hidden} more")]
    if bundle is not None:
        raise FetchError(
            f"{len(remote)} artifact(s) are neither in the bundle {bundle.where} nor in the cache",
            problems=problems,
            hint="rebuild the bundle with `kvenv bundle` for this profile and lock",
        )
    if offline:
        raise FetchError(
            f"{len(remote)} artifact(s) are not in the cache and --offline forbids downloads",
            problems=problems,
            hint=OFFLINE_HINT,
        )
    hub = [Problem(f"{a.label} from {source_text(a)}") for a in remote if _is_hub(a)]
    if hub and hub_offline():
        raise FetchError(
            f"HF_HUB_OFFLINE is set and {len(hub)} Hub artifact(s) are not in the cache",
            problems=hub,
            hint="unset HF_HUB_OFFLINE to download, or " + OFFLINE_HINT.split("; or")[0],
        )


def _fetch_parallel(
    pending: list[Artifact],
    store: ArtifactCache,
    *,
    jobs: int,
    progress: Progress | None,
    index_urls: Sequence[str],
    find_links: Sequence[str],
    timeout: float | None,
    on_ready: Callable[[str, Path], None] | None = None,
) -> dict[str, Path]:
    if not pending:
        return {}
    cancel = threading.Event()
    workers = min(jobs, len(pending))
    fetcher = _Fetcher(
        store, cancel, progress, tuple(index_urls), tuple(find_links), timeout, workers
    )
    results: dict[str, Path] = {}
    errors: list[KvenvError] = []
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvenv")
    futures: dict[Future[Path], Artifact] = {}
    try:
        fetcher.prefetch(pending)
        fetch = fetcher.fetch if on_ready is None else _then(fetcher.fetch, on_ready)
        futures = {pool.submit(fetch, artifact): artifact for artifact in pending}
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            cancel.set()
        wait(futures)
    finally:
        if any(not f.done() for f in futures):
            cancel.set()  # interrupted: stop running downloads at their next chunk
        pool.shutdown(wait=True, cancel_futures=True)
        fetcher.close()
    for future, artifact in futures.items():
        if future.cancelled():
            continue
        error = future.exception()
        if error is None:
            results[artifact.sha256] = future.result()
        elif isinstance(error, KvenvError):
            if not isinstance(error, Cancelled):
                errors.append(error)
        else:
            raise error
    if errors:
        errors.sort(key=lambda e: not isinstance(e, IntegrityError))
        first = errors[0]
        if len(errors) > 1:
            extra = [Problem(e.message) for e in errors[1:]]
            raise type(first)(first.message, problems=[*first.problems, *extra], hint=first.hint)
        raise first
    return results


def _then(
    fetch: Callable[[Artifact], Path], on_ready: Callable[[str, Path], None]
) -> Callable[[Artifact], Path]:
    """``fetch`` that hands each verified file to ``on_ready`` before it returns it."""

    def run(artifact: Artifact) -> Path:
        path = fetch(artifact)
        on_ready(artifact.sha256, path)
        return path

    return run


class _Fetcher:
    def __init__(
        self,
        store: ArtifactCache,
        cancel: threading.Event,
        progress: Progress | None,
        index_urls: tuple[str, ...],
        find_links: tuple[str, ...],
        timeout: float | None,
        workers: int = 1,
    ) -> None:
        self.store = store
        self.cancel = cancel
        self.progress = progress
        self.index_urls = index_urls
        self.find_links = find_links
        self.timeout = timeout
        self.workers = workers
        self._locator: _Locator | None = None
        self._locator_lock = threading.Lock()
        self._connections: _Connections | None = None
        self._connections_lock = threading.Lock()

    def prefetch(self, pending: Sequence[Artifact]) -> None:
        """Ask the index for the page of every project whose wheel must be located, at once."""
        wanted = [a.name for a in pending if _located(a)]
        if wanted:
            self.locator().prefetch(wanted)

    def locator(self) -> _Locator:
        """The one :class:`Locator` of this fetch (made on first use)."""
        with self._locator_lock:
            if self._locator is None:
                from kvenv.fetch.locate import Locator  # not imported by an offline apply
                from kvenv.lock.cache import IndexCache

                urls, links = self._index()
                self._locator = Locator(
                    urls, links, IndexCache(self.store.root), connections=self.connections()
                )
            return self._locator

    def connections(self) -> _Connections:
        """The pooled HTTP client of this fetch, shared by its page lookups and downloads:
        room for every download worker and every page lookup in flight at once."""
        with self._connections_lock:
            if self._connections is None:
                from kvenv.fetch.http import POOL, Connections  # not imported offline
                from kvenv.fetch.locate import WORKERS

                self._connections = Connections(max(POOL, self.workers + WORKERS))
            return self._connections

    def close(self) -> None:
        if self._locator is not None:
            self._locator.close()
        if self._connections is not None:
            self._connections.close()

    def fetch(self, artifact: Artifact) -> Path:
        if self.cancel.is_set():
            raise Cancelled(f"{artifact.label}: not started")
        source = artifact.source
        filename = artifact.filename
        if isinstance(source, HfSource):
            return self._from_hub(artifact, source)
        location: str | Path
        if isinstance(source, IndexSource):
            urls, links = self._index()
            location, filename = find_on_index(
                artifact.name,
                artifact.version,
                artifact.sha256,
                source,
                index_urls=urls,
                find_links=links,
            )
            _safe_filename(filename, artifact)
        elif isinstance(source, UrlSource):
            location = source.url
        elif _located(artifact):
            assert filename is not None
            location = self.locator().locate(artifact.name, filename, artifact.sha256)
        else:
            location = source
        if isinstance(location, Path):
            return self._from_file(artifact, location, filename or location.name)
        return self._from_url(artifact, location, filename or url_filename(location))

    def _index(self) -> tuple[list[str], list[str]]:
        """The given index and find-links, else those of the environment (as `kvenv lock`)."""
        if self.index_urls or self.find_links:
            return list(self.index_urls), list(self.find_links)
        from kvenv.lock.sources import index_config

        config = index_config(environ=os.environ, base=Path.cwd())
        return config.index_urls(), list(config.find_links)

    def _report(self, label: str) -> Callable[[int, int | None], None] | None:
        """``progress`` for the one file ``label``: called as ``report(done, total)``."""
        return None if self.progress is None else functools.partial(self.progress, label)

    def _from_hub(self, artifact: Artifact, source: HfSource) -> Path:
        directory = self.store.temp_dir()
        try:
            got = download_hf(
                source, directory, cancel=self.cancel, progress=self._report(artifact.label)
            )
            label = f"{artifact.label} (from {describe(source)})"
            verify_file(got, artifact.sha256, artifact.size, label=label)
            return self.store.commit(got, artifact.sha256, source.filename)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _from_file(self, artifact: Artifact, path: Path, filename: str) -> Path:
        label = f"{artifact.label} (from {path})"
        if not path.is_file():
            raise FetchError(f"artifact file not found: {path}", hint="check the profile/lock")
        if artifact.size is not None and path.stat().st_size != artifact.size:
            raise size_mismatch(label, artifact.size, path.stat().st_size)
        with self.store.writer(label, artifact.size) as (sink, part), open(path, "rb") as src:
            copy_hashing(src, sink)
            sink.check(artifact.sha256, artifact.size)
        return self._commit(part, artifact, filename)

    def _from_url(self, artifact: Artifact, url: str, filename: str) -> Path:
        _safe_filename(filename, artifact)
        label = f"{artifact.label} (from {redact_url(url)})"
        last: FetchError | None = None
        for attempt in range(ATTEMPTS):
            if self.cancel.is_set():
                raise Cancelled(f"{artifact.label}: cancelled")
            try:
                with self.store.writer(label, artifact.size) as (sink, part):
                    import kvenv.fetch.http as http  # not imported by an offline apply

                    http.download(
                        url,
                        sink,
                        size=artifact.size,
                        timeout=http.DEFAULT_TIMEOUT if self.timeout is None else self.timeout,
                        cancel=self.cancel,
                        progress=self._report(artifact.label),
                        connections=self.connections(),
                    )
                    sink.check(artifact.sha256, artifact.size)
                return self._commit(part, artifact, filename)
            except TransientFetchError as exc:
                last = exc
                if attempt + 1 < ATTEMPTS:
                    time.sleep(BACKOFF_SECONDS * (attempt + 1))
        raise last or FetchError(f"download of {label} failed")

    def _commit(self, part: Path, artifact: Artifact, filename: str) -> Path:
        try:
            return self.store.commit(part, artifact.sha256, filename)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
