"""Building a generation's directories from the store: hard links made by a few threads, and
console scripts given the generation's interpreter. Imports only the standard library (the
recall of a warm apply, :mod:`kvenv.env.recall`, links with it without the model)."""

from __future__ import annotations

import errno
import os

from kvenv._util.threads import thread_map

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Callable, Mapping, Sized
    from typing import Any

    from kvenv._util.progress import Progress


LINK_CHUNK = 256  # files per task: few enough tasks to keep the pool's overhead small


def link_many(
    by_dir: Mapping[str, list[tuple[str, str]]], *, jobs: int, progress: Progress | None = None
) -> None:
    """Create each directory and hard-link its files; ``jobs`` threads take batches of whole
    directories (``os.makedirs`` makes a parent another batch has not made yet)."""
    directories = sorted(by_dir)
    total = sum(len(items) for items in by_dir.values())
    if not total:
        return
    link: Callable[[str, str], Any] = os.link
    first_source, first_dest = by_dir[directories[0]][0]
    os.makedirs(directories[0], exist_ok=True)
    try:
        os.link(first_source, first_dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        import shutil  # only where hard links fail

        link = shutil.copy2
        shutil.copy2(first_source, first_dest)

    def run(batch: list[str]) -> int:
        count = 0
        for directory in batch:
            make_dir(directory)
            for source, dest in by_dir[directory]:
                if dest != first_dest:
                    link(source, dest)
                    count += 1
        return count

    batches = _batches(directories, by_dir)
    done = 1
    if total < 2 * LINK_CHUNK or jobs <= 1:
        done += sum(run(batch) for batch in batches)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(jobs, thread_name_prefix="kvenv-link") as pool:
            for count in pool.map(run, batches):
                done += count
                if progress:
                    progress("link", done, total)
    if progress:
        progress("link", done, total)


def _batches(directories: list[str], by_dir: Mapping[str, Sized]) -> list[list[str]]:
    """Whole directories (sorted), grouped into tasks of about :data:`LINK_CHUNK` files."""
    batches: list[list[str]] = [[]]
    size = 0
    for directory in directories:
        if size >= LINK_CHUNK:
            batches.append([])
            size = 0
        batches[-1].append(directory)
        size += len(by_dir[directory])
    return batches


FileSeal = tuple[int, int, int]  # size, mode, mtime_ns: what a store entry's seal records


def link_checked(by_dir: Mapping[str, list[tuple[str, str, FileSeal]]], *, jobs: int) -> str | None:
    """Create each directory and hard-link its files, each file checked against its seal
    (size, mode, mtime: :mod:`kvenv.env.seal`) right before it is linked, by ``jobs`` threads;
    the first file that no longer matches, or that cannot be hard-linked, stops the work and
    is returned (the caller removes what was made); None when every file was linked."""
    import threading

    stop = threading.Event()
    found: list[str] = []

    def run(batch: list[str]) -> None:
        lstat, link = os.lstat, os.link
        for directory in batch:
            if stop.is_set():
                return
            make_dir(directory)
            for source, dest, (size, mode, mtime) in by_dir[directory]:
                try:
                    info = lstat(source)
                    if (
                        info.st_size != size
                        or info.st_mode & 0o7777 != mode
                        or info.st_mtime_ns != mtime
                    ):
                        raise ValueError(source)
                    link(source, dest)
                except (OSError, ValueError):
                    found.append(source)
                    stop.set()
                    return

    thread_map(run, _batches(sorted(by_dir), by_dir), jobs, "kvenv-link")
    return found[0] if found else None


def new_dir(directory: str) -> bool:
    """``os.mkdir(directory)``; False when it exists already as a directory (another thread
    may have made it first)."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        if not os.path.isdir(directory):
            raise
        return False
    return True


def make_dir(directory: str) -> None:
    """``os.makedirs(directory, exist_ok=True)`` in one system call when the parent exists
    (directories are linked in sorted order, so it usually does): a warm apply makes one per
    directory of every wheel."""
    try:
        new_dir(directory)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)


def group_links(
    by_dir: Mapping[str, list[tuple[str, str]]], store: str, generation: str
) -> list[list[str]] | None:
    """The hard links of a layer (source under ``store``, destination under ``generation``)
    as ``[entry, source prefix, destination prefix, the paths under both, one per line]``:
    what a recall of the generation links again (:mod:`kvenv.env.recall`), a fraction of the
    memory of the pairs themselves, kept after they are freed. None for a link it cannot
    describe so (a path with a line break, a source or destination elsewhere)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    base, made = store + "/", generation + "/"
    for pairs in by_dir.values():
        for source, dest in pairs:
            if "/../" in source:  # a file of data/, include/: "<entry>/site/../data/..."
                source = os.path.normpath(source)
            if not (source.startswith(base) and dest.startswith(made)):
                return None
            sha, _, rel = source[len(base) :].partition("/")
            top, _, rest = rel.partition("/")
            if not rest or "\n" in rest or not dest.endswith("/" + rest):
                return None
            key = (sha, top + "/", dest[len(made) : -len(rest)])
            found = groups.get(key)
            if found is None:
                found = groups[key] = []
            found.append(rest)
    return [[sha, src, dst, "\n".join(rests)] for (sha, src, dst), rests in groups.items()]


def with_shebang(data: bytes, python: str) -> bytes:
    """A script's bytes with the portable ``#!python`` first line replaced by ``#!PYTHON``
    (what :func:`installer.utils.fix_shebang` does, without importing PyPA's installer on
    the linking path); any other script unchanged."""
    if not data.startswith(b"#!python"):
        return data
    newline = data.find(b"\n")
    return f"#!{python}\n".encode() + (data[newline + 1 :] if newline >= 0 else b"")
