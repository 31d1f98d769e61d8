"""A content-addressed store of unpacked wheels, and generations built from it by hard links.

Each wheel is unpacked once, by :func:`kvenv.wheelinstall.install_wheel`, into
``<cache>/store/<sha256>/`` with the layout of a generation (``site/``, ``bin/``, ``data/``,
``include/``): it is written into a temporary directory beside it and renamed into place, and
the marker file ``.kvenv-store.json`` (what was installed, every RECORD path) makes an entry
complete. A generation is then built by hard-linking the files (copying where links fail, e.g.
across filesystems), so re-applying wheels seen before costs links, not unzips. Relative RECORD
paths (``../bin/x``) stay valid because the generation has the same sibling layout.

Console scripts are stored with the portable ``#!python`` shebang and written into a
generation with its interpreter's shebang; such a distribution gets a fresh RECORD with the
scripts' new hashes (every other file and RECORD is a link).
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from kvenv import convert
from kvenv.errors import InputError, InstallError, IntegrityError
from kvenv.wheelinstall import InstalledDist, import_name_of, install_wheel, protected_import_names

MARKER = ".kvenv-store.json"
STORE_FORMAT = 1
PORTABLE_PYTHON = "python"
LAYOUT = ("site", "bin", "data", "include")


@attrs.frozen
class StoreEntry:
    """A complete, unpacked wheel in the store."""

    sha256: str
    path: Path
    dist: InstalledDist

    def source_of(self, record_path: str) -> Path:
        return self.path / "site" / record_path


@attrs.frozen
class _Marker:
    format: int
    sha256: str
    dist: InstalledDist


Progress = Callable[[str, int, int], None]


def entry_dir(store: Path, sha256: str) -> Path:
    return store / sha256


def lookup(store: Path, sha256: str) -> StoreEntry | None:
    """The complete store entry for ``sha256``, or None."""
    directory = entry_dir(store, sha256)
    try:
        data = json.loads((directory / MARKER).read_text(encoding="utf-8"))
        marker = convert.structure(data, _Marker, file=str(directory / MARKER), what="marker")
    except (OSError, ValueError, InputError):
        return None  # absent, partial or from another kvenv version: not a complete entry
    if marker.format != STORE_FORMAT or marker.sha256 != sha256:
        return None
    return StoreEntry(sha256, directory, marker.dist)


def unpack(
    store: Path, sha256: str, wheel: Path, *, protected: Iterable[str] = (), jobs: int = 1
) -> StoreEntry:
    """Unpack ``wheel`` (already verified to have ``sha256``) into the store, once; a large
    wheel is written by ``jobs`` threads."""
    found = lookup(store, sha256)
    if found is not None:
        return found
    store.mkdir(parents=True, exist_ok=True)
    final = entry_dir(store, sha256)
    if final.exists():  # an entry without a valid marker: a leftover, never a complete entry
        shutil.rmtree(final)
    temp = Path(tempfile.mkdtemp(prefix=f".tmp-{sha256[:16]}-", dir=store))
    try:
        dist = install_wheel(
            wheel,
            temp / "site",
            protected=protected,
            python=PORTABLE_PYTHON,
            bin_dir=temp / "bin",
            data_dir=temp / "data",
            include_dir=temp / "include",
            jobs=jobs,
        )
        marker = convert.unstructure(_Marker(STORE_FORMAT, sha256, dist))
        (temp / MARKER).write_text(json.dumps(marker), encoding="utf-8")
        try:
            os.rename(temp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            shutil.rmtree(temp)  # another process finished the same entry first
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    entry = lookup(store, sha256)
    if entry is None:
        raise InstallError(f"store entry for {wheel.name} is unreadable: {final}")
    return entry


def unpack_all(
    store: Path,
    wheels: Mapping[str, Path],
    *,
    protected: Iterable[str] = (),
    jobs: int = 8,
    progress: Progress | None = None,
) -> dict[str, StoreEntry]:
    """Unpack every wheel (sha256 -> verified file) not yet in the store, in parallel."""
    protected = tuple(protected)
    out: dict[str, StoreEntry] = {}
    todo: dict[str, Path] = {}
    for sha, path in wheels.items():
        found = lookup(store, sha)
        if found is None:
            todo[sha] = path
        else:
            out[sha] = found
    if todo:
        workers = max(1, min(_cpu_jobs(jobs), len(todo)))
        with ThreadPoolExecutor(workers, thread_name_prefix="kvenv-unpack") as pool:
            futures = {
                sha: pool.submit(unpack, store, sha, path, protected=protected, jobs=workers)
                for sha, path in sorted(todo.items(), key=lambda kv: -_size(kv[1]))
            }
            for done, (sha, future) in enumerate(futures.items(), 1):
                out[sha] = future.result()
                if progress:
                    progress("unpack", done, len(todo))
    return {sha: out[sha] for sha in wheels}


def _cpu_jobs(jobs: int) -> int:
    """Threads for unpacking or linking: ``jobs`` (sized for downloads) but no more than the
    CPUs, since inflating, hashing and file creation gain nothing from more (measured)."""
    return max(1, min(jobs, os.cpu_count() or 1))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@attrs.frozen
class GenerationLayout:
    """The directories one layer of a generation is built into (siblings, like the store)."""

    site: Path
    bin: Path
    data: Path
    include: Path

    @classmethod
    def beside(cls, site: Path) -> GenerationLayout:
        parent = site.parent
        return cls(site, parent / "bin", parent / "data", parent / "include")


def check_protected(entries: Sequence[StoreEntry], protected: Iterable[str]) -> None:
    """Refuse a store entry whose files land in a protected import name (the store is shared
    between profiles, so each generation checks again with its own protected set)."""
    names = protected_import_names(protected)
    for entry in entries:
        firsts = {path.split("/", 1)[0] for path in entry.dist.files if not path.startswith("../")}
        for first in sorted(firsts):
            if import_name_of(first) in names:
                record_path = next(p for p in entry.dist.files if p.split("/", 1)[0] == first)
                raise IntegrityError(
                    f"{entry.dist.name} {entry.dist.version} would write {record_path!r} into "
                    f"the protected package {first!r}",
                    hint="protected host packages are never written or shadowed; remove the "
                    "wheel from the overlay",
                )


def link_layer(
    entries: Sequence[StoreEntry],
    layout: GenerationLayout,
    *,
    python: str,
    protected: Iterable[str] = (),
    jobs: int = 8,
    progress: Progress | None = None,
) -> list[InstalledDist]:
    """Build one layer (native or overlay) of a generation from store entries.

    The file list comes from each entry's marker (no RECORD is parsed, no file is stat'ed);
    each directory is created once and the files are hard-linked by ``jobs`` threads.
    Two distributions providing the same path is allowed only when the bytes are identical.
    Returns each distribution with the digest of its RECORD as it is in the generation.
    """
    check_protected(entries, protected)
    bases = {name: str(getattr(layout, name)) for name in ("site", "bin", "data", "include")}
    plan: dict[str, tuple[StoreEntry, str]] = {}
    scripts: list[tuple[StoreEntry, str, Path]] = []
    for entry in entries:
        record_name = f"{entry.dist.dist_info}/RECORD"
        skip_record = bool(entry.dist.scripts)  # rewritten below with the scripts' real hashes
        for record_path in entry.dist.files:
            dest = _destination_text(bases, record_path)
            if record_path.startswith("../bin/"):
                scripts.append((entry, record_path, Path(dest)))
                continue
            if skip_record and record_path == record_name:
                continue
            previous = plan.get(dest)
            if previous is not None:
                _same_or_conflict(previous, (entry, record_path), Path(dest))
                continue
            plan[dest] = (entry, record_path)
    by_dir: dict[str, list[tuple[str, str]]] = {}
    for dest, (entry, path) in plan.items():
        by_dir.setdefault(dest.rpartition("/")[0], []).append((f"{entry.path}/site/{path}", dest))
    for directory in sorted({str(d.parent) for _, _, d in scripts}):
        os.makedirs(directory, exist_ok=True)
    _link_many(by_dir, jobs=_cpu_jobs(jobs), progress=progress)
    rewritten = _write_scripts(scripts, python)
    out: list[InstalledDist] = []
    for entry in entries:
        record = layout.site / entry.dist.dist_info / "RECORD"
        if entry.dist.scripts:
            _write_record(entry, record, rewritten)
        digest = "sha256:" + hashlib.sha256(record.read_bytes()).hexdigest()
        out.append(attrs.evolve(entry.dist, record_digest=digest))
    return out


def _destination_text(bases: Mapping[str, str], record_path: str) -> str:
    """Where a RECORD path (relative to the store entry's ``site``) lands in the layer."""
    if record_path.startswith("../"):
        for name in ("bin", "data", "include"):
            prefix = f"../{name}/"
            if record_path.startswith(prefix):
                return f"{bases[name]}/{record_path[len(prefix) :]}"
    return f"{bases['site']}/{record_path}"


def _same_or_conflict(
    first: tuple[StoreEntry, str], second: tuple[StoreEntry, str], dest: Path
) -> None:
    a = first[0].source_of(first[1])
    b = second[0].source_of(second[1])
    if _same_bytes(a, b):
        return
    raise InstallError(
        f"{first[0].dist.name} and {second[0].dist.name} both provide {dest.name} "
        f"({first[1]}) with different contents",
        hint="two wheels of the overlay overwrite each other; fix the lock so only one provides it",
    )


def _same_bytes(a: Path, b: Path) -> bool:
    import filecmp

    return filecmp.cmp(a, b, shallow=False)


LINK_CHUNK = 256  # files per task: few enough tasks to keep the pool's overhead small


def _link_many(
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
        link = shutil.copy2
        shutil.copy2(first_source, first_dest)

    def run(batch: list[str]) -> int:
        count = 0
        for directory in batch:
            os.makedirs(directory, exist_ok=True)
            for source, dest in by_dir[directory]:
                if dest != first_dest:
                    link(source, dest)
                    count += 1
        return count

    batches: list[list[str]] = [[]]
    size = 0
    for directory in directories:
        if size >= LINK_CHUNK:
            batches.append([])
            size = 0
        batches[-1].append(directory)
        size += len(by_dir[directory])
    done = 1
    if total < 2 * LINK_CHUNK or jobs <= 1:
        done += sum(run(batch) for batch in batches)
    else:
        with ThreadPoolExecutor(jobs, thread_name_prefix="kvenv-link") as pool:
            for count in pool.map(run, batches):
                done += count
                if progress:
                    progress("link", done, total)
    if progress:
        progress("link", done, total)


def _write_scripts(scripts: list[tuple[StoreEntry, str, Path]], python: str) -> dict[str, str]:
    """Copy scripts with the generation's shebang; return dest path -> new RECORD row."""
    from installer.utils import fix_shebang

    rows: dict[str, str] = {}
    for entry, record_path, dest in scripts:
        source = entry.source_of(record_path)
        data = source.read_bytes()
        with fix_shebang(io.BytesIO(data), python) as fixed:
            content = fixed.read()
        if dest.exists():
            if dest.read_bytes() != content:
                raise InstallError(
                    f"two distributions provide the script {dest.name} with different contents",
                    hint="fix the lock so only one wheel provides it",
                )
        else:
            dest.write_bytes(content)
            os.chmod(dest, source.stat().st_mode & 0o7777)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode().rstrip("=")
        rows[f"{entry.sha256}:{record_path}"] = f"sha256={digest}"
        rows[f"{entry.sha256}:{record_path}:size"] = str(len(content))
    return rows


def _write_record(entry: StoreEntry, record: Path, rewritten: Mapping[str, str]) -> None:
    source = entry.source_of(f"{entry.dist.dist_info}/RECORD")
    rows = list(csv.reader(source.read_text(encoding="utf-8").splitlines()))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        if len(row) == 3 and f"{entry.sha256}:{row[0]}" in rewritten:
            key = f"{entry.sha256}:{row[0]}"
            row = [row[0], rewritten[key], rewritten[f"{key}:size"]]
        writer.writerow(row)
    record.write_text(out.getvalue(), encoding="utf-8")
