"""A content-addressed store of unpacked wheels, and generations built from it by hard links.

Each wheel is unpacked once, by :func:`kvenv.env.wheelinstall.install_wheel`, into
``<cache>/store/<sha256>/`` with the layout of a generation (``site/``, ``bin/``, ``data/``,
``include/``): it is written into a temporary directory beside it and renamed into place, and
the marker file ``.kvenv-store.json`` (what was installed, every RECORD path) makes an entry
complete. A generation is then built by hard-linking the files (copying where links fail, e.g.
across filesystems), so re-applying wheels seen before costs links, not unzips. Relative RECORD
paths (``../bin/x``) stay valid because the generation has the same sibling layout.

Console scripts are stored with the portable ``#!python`` shebang and written into a
generation with its interpreter's shebang; such a distribution gets a fresh RECORD with the
scripts' new hashes (every other file and RECORD is a link).

Two wheels of one layer providing the same file: identical bytes are one file; different bytes
are resolved deterministically, as ``pip install --target`` does for the first wheel it
installs: the distribution first in canonical name order (the lock's order) keeps the file and
the conflict is reported (:class:`kvenv.env.manifest.FileConflict`). A file the overlay would add
to the directories it shares with the native layer (``bin``, ``data``, ``include``) that the
native wheel already provides with other bytes is an error: the overlay never replaces the
native wheel's files. (Same-named modules in ``native/`` and ``overlay/`` are separate files;
which one imports is the activation's order, overlay first.)

A store entry unpacked with a waived RECORD (its hash/size lies are in the marker) is linked
only into a layer whose profile waives that distribution too. Likewise the marker keeps the
wheel's executable ``.pth`` lines, and an overlay layer links such an entry only when its
profile allows the distribution (``[[overlay.allow_pth]]``).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs

from kvenv._util import jsonio, memo
from kvenv._util.identity import of_stat
from kvenv._util.importnames import fold, import_name_of, protected_import_names
from kvenv._util.progress import Progress
from kvenv._util.threads import thread_map
from kvenv.env.linking import group_links, link_many, with_shebang
from kvenv.env.manifest import FileConflict, Layer
from kvenv.env.seal import (
    publish_sealed,
    record_problems,
    remove_sealed,
    reseal,
    seal,
    seal_problem,
)
from kvenv.env.wheelinstall import InstalledDist, install_wheel
from kvenv.errors import InputError, InstallError, IntegrityError
from kvenv.model import convert

if TYPE_CHECKING:
    from kvenv.env.bytecode import Bytecode
    from kvenv.env.unpackworker import Workers

_T = TypeVar("_T")
MARKER = ".kvenv-store.json"
# 2: the marker records the RECORD lies a waiver accepted (``record_waived``); an entry of
# format 1 cannot say whether it has any, so it is unpacked again.
# 3: the marker records the wheel's executable .pth lines (``executable_pth``).
STORE_FORMAT = 3
PORTABLE_PYTHON = "python"


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


def entry_dir(store: Path, sha256: str) -> Path:
    return store / sha256


# Markers already read by this process, by path and the identity of the file read: an apply
# looks each entry up several times (plan, .pth findings, unpack, fetch).
_MARKERS: dict[str, tuple[tuple[int, ...], StoreEntry]] = {}


def lookup(store: Path, sha256: str) -> StoreEntry | None:
    """The complete store entry for ``sha256``, or None. A marker read before by this process
    whose file still has the same identity (device, inode, size, mtime, ctime) is not parsed
    again: markers are written once, beside the entry, and renamed into place with it."""
    directory = entry_dir(store, sha256)
    path = os.fspath(directory / MARKER)
    memo.note("bytes", path)  # before it is read: a change meanwhile is a miss next time
    try:
        with open(path, "rb") as stream:
            identity = tuple(of_stat(os.fstat(stream.fileno())))
            known = _MARKERS.get(path)
            if known is not None and known[0] == identity:
                return known[1]
            data = jsonio.loads_json(stream.read(), file=str(path))
        marker = convert.structure(data, _Marker, file=path, what="marker")
    except (OSError, ValueError, InputError):
        return None  # absent, partial or from another kvenv version: not a complete entry
    if marker.format != STORE_FORMAT or marker.sha256 != sha256:
        return None
    entry = StoreEntry(sha256, directory, marker.dist)
    _MARKERS[path] = (identity, entry)
    return entry


def unpack(
    store: Path,
    sha256: str,
    wheel: Path,
    *,
    protected: Iterable[str] = (),
    record_waivers: Iterable[str] = (),
    jobs: int = 1,
    progress: Progress | None = None,
) -> StoreEntry:
    """Unpack ``wheel`` (already verified to have ``sha256``) into the store, once; a large
    wheel is written by ``jobs`` threads (``progress`` hears its bytes as they are written).
    ``record_waivers`` names the distributions whose RECORD hash/size lies are accepted (and
    kept in the entry's marker)."""
    found = lookup(store, sha256)
    if found is not None:
        return found
    store.mkdir(parents=True, exist_ok=True)
    final = entry_dir(store, sha256)
    if final.exists():
        # Another process sharing this store may have renamed its complete entry into place
        # since the look above (and may be linking from it): use it. Only an entry that is
        # still without a valid marker is a leftover, never a complete entry.
        found = lookup(store, sha256)
        if found is not None:
            return found
        remove_sealed(final)
    temp = Path(tempfile.mkdtemp(prefix=f".tmp-{sha256[:16]}-", dir=store))
    try:
        try:
            dist = install_wheel(
                wheel,
                temp / "site",
                protected=protected,
                python=PORTABLE_PYTHON,
                bin_dir=temp / "bin",
                data_dir=temp / "data",
                include_dir=temp / "include",
                record_waivers=record_waivers,
                jobs=jobs,
                progress=progress,
                read_only=True,  # the seal's modes from the start: no chmod per file
            )
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise IntegrityError(
                f"{wheel} is not a readable wheel ({exc})",
                hint="the file is damaged; kvenv fetches a damaged cached file again",
            ) from None
        marker = convert.unstructure(_Marker(STORE_FORMAT, sha256, dist))
        (temp / MARKER).write_text(json.dumps(marker, separators=(",", ":")), encoding="utf-8")
        seal(temp)
        if publish_sealed(temp, final):
            return StoreEntry(sha256, final, dist)  # the marker just written, not read back
    except BaseException:
        with contextlib.suppress(OSError):
            remove_sealed(temp)
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
    record_waivers: Iterable[str] = (),
    jobs: int = 8,
    progress: Progress | None = None,
    full_check: bool = False,
    on_damaged: Callable[[str], None] | None = None,
) -> dict[str, StoreEntry]:
    """Unpack every wheel (sha256 -> verified file) not yet in the store, in parallel.

    An entry already in the store is reused only while it matches its seal (or, with
    ``full_check``, its RECORD byte for byte); one that does not is verified in full, and if
    its bytes changed it is removed and unpacked again from the wheel (``on_damaged`` hears
    which entry and why)."""
    from concurrent.futures import ThreadPoolExecutor  # not imported by `kvenv plan`

    protected = tuple(protected)
    waivers = tuple(record_waivers)
    out: dict[str, StoreEntry] = {}
    todo: dict[str, Path] = {}

    def reusable(sha: str) -> StoreEntry | None:
        found = lookup(store, sha)
        if found is not None and not _intact(found, full_check=full_check, on_damaged=on_damaged):
            remove_sealed(found.path)
            found = None
        return found

    # A warm apply checks every entry's seal (a stat per file): by ``jobs`` threads, as the
    # system calls release the GIL; the results are taken in the wheels' order.
    reused = thread_map(reusable, list(wheels), _cpu_jobs(jobs), "kvenv-seal")
    for (sha, path), found in zip(wheels.items(), reused, strict=True):
        if found is None:
            todo[sha] = path
        else:
            out[sha] = found
    if todo:
        workers = max(1, min(_cpu_jobs(jobs), len(todo)))
        processes = _processes(workers)
        try:
            with ThreadPoolExecutor(workers, thread_name_prefix="kvenv-unpack") as pool:
                futures = {
                    sha: pool.submit(
                        _unpack_in,
                        processes,
                        store,
                        sha,
                        path,
                        protected=protected,
                        record_waivers=waivers,
                        jobs=workers,
                        progress=progress,
                    )
                    for sha, path in sorted(todo.items(), key=lambda kv: -_size(kv[1]))
                }
                for sha, future in futures.items():
                    out[sha] = future.result()
        finally:
            if processes is not None:
                processes.close()
    return {sha: out[sha] for sha in wheels}


def _processes(workers: int) -> Workers | None:
    """Worker processes for the unpacking threads, where a second CPU is there to use them
    (:mod:`kvenv.env.unpackworker`); None: every wheel unpacks in its thread."""
    from kvenv.env import unpackworker

    return unpackworker.Workers() if workers > 1 and unpackworker.available() else None


def _unpack_in(
    processes: Workers | None,
    store: Path,
    sha256: str,
    wheel: Path,
    *,
    protected: Iterable[str],
    record_waivers: Iterable[str],
    jobs: int,
    progress: Progress | None,
) -> StoreEntry:
    """:func:`unpack` of a wheel its caller found no entry for, in this thread's worker
    process when there are workers and the wheel is large enough to be worth one (an entry
    another process finished meanwhile is taken by :func:`unpack`, in either place)."""
    from kvenv.env.unpackworker import WORKER_MIN_BYTES

    def run(fn: Callable[..., _T]) -> _T:
        return fn(
            store,
            sha256,
            wheel,
            protected=protected,
            record_waivers=record_waivers,
            jobs=jobs,
            progress=progress,
        )

    if processes is not None and _size(wheel) >= WORKER_MIN_BYTES and run(processes.unpack):
        entry = lookup(store, sha256)
        if entry is None:
            where = entry_dir(store, sha256)
            raise InstallError(f"store entry for {wheel.name} is unreadable: {where}")
        return entry
    return run(unpack)


class Unpacker:
    """Wheels unpacked into the store as they arrive (:meth:`submit`, from any thread: a
    download verified, a cached file found), by as many threads as there are CPUs, while the
    rest still download: the pipeline of a cold apply. An entry already in the store is reused
    while it is intact, as :func:`unpack_all` does; each entry, once complete, is handed to
    ``then`` (the bytecode compiler: :class:`kvenv.env.bytecode.Compiler`)."""

    def __init__(
        self,
        store: Path,
        *,
        protected: Iterable[str] = (),
        record_waivers: Iterable[str] = (),
        jobs: int = 8,
        progress: Progress | None = None,
        full_check: bool = False,
        on_damaged: Callable[[str], None] | None = None,
        then: Callable[[StoreEntry], None] | None = None,
    ) -> None:
        import threading
        from concurrent.futures import Future, ThreadPoolExecutor

        self.store = store
        self.protected = tuple(protected)
        self.waivers = tuple(record_waivers)
        self.workers = _cpu_jobs(jobs)
        self.progress = progress
        self.full_check = full_check
        self.on_damaged = on_damaged
        self.then = then
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kvenv-unpack")
        self._processes = _processes(self.workers)
        self._futures: dict[str, Future[StoreEntry]] = {}

    def submit(self, sha256: str, wheel: Path) -> None:
        """Unpack ``wheel`` (verified to have ``sha256``) unless it is already under way."""
        with self._lock:
            if sha256 not in self._futures:
                self._futures[sha256] = self._pool.submit(self._one, sha256, wheel)

    def _one(self, sha256: str, wheel: Path) -> StoreEntry:
        found = lookup(self.store, sha256)
        if found is not None and not _intact(
            found, full_check=self.full_check, on_damaged=self.on_damaged
        ):
            remove_sealed(found.path)
            found = None
        if found is None:
            found = _unpack_in(
                self._processes,
                self.store,
                sha256,
                wheel,
                protected=self.protected,
                record_waivers=self.waivers,
                jobs=self.workers,
                progress=self.progress,
            )
        if self.then is not None:
            self.then(found)
        return found

    def results(self, wheels: Mapping[str, Path]) -> dict[str, StoreEntry]:
        """Every wheel's entry (sha256 -> verified file; those not submitted yet are now),
        in the wheels' order, once all are unpacked; the first failure is raised."""
        for sha, path in sorted(wheels.items(), key=lambda kv: -_size(kv[1])):
            self.submit(sha, path)
        with self._lock:
            futures = {sha: self._futures[sha] for sha in wheels}
        return {sha: future.result() for sha, future in futures.items()}

    def close(self) -> None:
        """Wait for the unpacks under way; those not started are dropped."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._processes is not None:
            self._processes.close()


def _intact(
    entry: StoreEntry, *, full_check: bool, on_damaged: Callable[[str], None] | None
) -> bool:
    """Whether a store entry may be linked: its seal holds (cheap), or its files still match
    its RECORD (then it is sealed again, e.g. after a ``touch``)."""
    broken = seal_problem(entry.path)
    if broken is None and not full_check:
        return True
    problems = record_problems(entry.path / "site", entry.dist.dist_info)
    if not problems:
        if broken is not None:
            reseal(entry.path)
        return True
    if on_damaged is not None:
        on_damaged(
            f"store entry of {entry.dist.name} {entry.dist.version} was damaged "
            f"({problems[0]}{' ...' if len(problems) > 1 else ''}); unpacked again from the wheel"
        )
    return False


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


def check_record_waivers(entries: Sequence[StoreEntry], record_waivers: Iterable[str]) -> None:
    """Refuse a store entry whose RECORD lies about some file's hash or size unless this
    profile waives that distribution's RECORD (the store is shared between profiles)."""
    waived = {fold(name) for name in record_waivers}
    for entry in entries:
        lies = entry.dist.record_waived
        if lies and fold(entry.dist.name) not in waived:
            shown = ", ".join(m.file for m in lies[:3]) + (" ..." if len(lies) > 3 else "")
            raise IntegrityError(
                f"wheel content does not match its RECORD: {entry.dist.name} "
                f"{entry.dist.version} ({len(lies)} file(s): {shown})",
                hint="nothing was installed; if the published wheel is known to ship a wrong "
                "RECORD, waive it in the profile: [[overlay.record_waivers]] with a reason",
            )


def check_pth(entries: Sequence[StoreEntry], allow_pth: Iterable[str]) -> None:
    """Refuse a store entry that ships a ``.pth`` line ``site`` would execute at every start
    (``import ...``) unless this profile allows that distribution (``[[overlay.allow_pth]]``)."""
    allowed = {fold(name) for name in allow_pth}
    for entry in entries:
        hooks = entry.dist.executable_pth
        if hooks and fold(entry.dist.name) not in allowed:
            first = hooks[0]
            more = f" (and {len(hooks) - 1} more line(s))" if len(hooks) > 1 else ""
            raise IntegrityError(
                f"{entry.dist.name} {entry.dist.version} ships {first.file} with a line Python "
                f"executes at every start: {first.line!r}{more}",
                hint="nothing was installed; if you trust it, allow it in the profile: "
                f'[[overlay.allow_pth]] name = "{entry.dist.name}" with a reason; else remove '
                "the wheel from the overlay",
            )


@attrs.frozen
class LinkedLayer:
    """What :func:`link_layer` built: each distribution (RECORD digest as in the generation)
    and the file conflicts it resolved."""

    dists: list[InstalledDist]
    conflicts: list[FileConflict]
    # What was made, for a recall of the generation (kvenv.env.recall): the hard links, grouped
    # (kvenv.env.linking.group_links; None: not describable so), each script (source in the
    # store, destination) and each RECORD written anew.
    links: list[list[str]] | None = attrs.field(default=None, eq=False, repr=False)
    scripts: list[tuple[str, str]] = attrs.field(factory=list, eq=False, repr=False)
    records: list[str] = attrs.field(factory=list, eq=False, repr=False)


_Source = tuple[StoreEntry, str]  # a store entry and a RECORD path in it


def link_layer(
    entries: Sequence[StoreEntry],
    layout: GenerationLayout,
    *,
    python: str,
    protected: Iterable[str] = (),
    record_waivers: Iterable[str] = (),
    layer: Layer = "overlay",
    jobs: int = 8,
    progress: Progress | None = None,
    allow_pth: Iterable[str] = (),
    bytecode: Mapping[str, Bytecode] | None = None,
) -> LinkedLayer:
    """Build one layer (native or overlay) of a generation from store entries.

    The file list comes from each entry's marker (no RECORD is parsed, no file is stat'ed);
    each directory is created once and the files are hard-linked by ``jobs`` threads.
    Two distributions providing the same path with different bytes: the first in canonical
    name order keeps it and the conflict is returned. A file of the directories shared with
    another layer that exists already with other bytes is an :class:`InstallError`. An
    overlay wheel with an executable ``.pth`` line is refused unless ``allow_pth`` names it.
    ``bytecode`` (by wheel sha256: :mod:`kvenv.env.bytecode`) adds each wheel's ``.pyc``
    files and takes its RECORD (with their rows) from the bytecode entry.
    """
    check_protected(entries, protected)
    check_record_waivers(entries, record_waivers)
    if layer == "overlay":
        check_pth(entries, allow_pth)
    bases = {name: str(getattr(layout, name)) for name in ("site", "bin", "data", "include")}
    site = bases["site"] + "/"
    plan: dict[str, _Source] = {}
    others: dict[str, list[_Source]] = {}
    compiled = _compiled(entries, bytecode or {})
    for entry in entries:
        own_record = f"{entry.dist.dist_info}/RECORD"
        # rewritten below with the scripts' real hashes
        skip = own_record if entry.dist.scripts else None
        code = compiled.get(id(entry))
        for record_path in entry.dist.files:
            source = entry
            if record_path.startswith("../"):
                dest = _destination_text(bases, record_path)
            elif record_path == skip:
                continue
            else:
                dest = site + record_path
                if code is not None and record_path == own_record:
                    source = code[0]  # the RECORD with the .pyc rows
            if dest in plan:
                others.setdefault(dest, []).append((source, record_path))
            else:
                plan[dest] = (source, record_path)
        if code is not None:
            holder, found = code
            for pyc in found.pyc.values():
                dest = site + pyc
                if dest in plan:
                    others.setdefault(dest, []).append((holder, pyc))
                else:
                    plan[dest] = (holder, pyc)
    conflicts = _resolve(plan, others, layer) if others else []
    if compiled and conflicts:
        # a .pyc follows its source (same winner, by name order): only the source's conflict
        # is reported (kvenv.env.verify.shadowed_rows skips the loser's .pyc rows with it)
        pycs = {pyc for _, code in compiled.values() for pyc in code.pyc.values()}
        conflicts = [c for c in conflicts if c.file not in pycs]
    _drop_shared(plan, bases["site"])
    by_dir: dict[str, list[tuple[str, str]]] = {}
    scripts: list[tuple[StoreEntry, str, Path]] = []
    sources = {id(entry): f"{entry.path}/site/" for entry in entries}
    sources.update({id(code): f"{code.path}/site/" for code, _ in compiled.values()})
    for dest, (entry, path) in plan.items():
        if path.startswith("../bin/"):
            scripts.append((entry, path, Path(dest)))
            continue
        directory = dest[: dest.rindex("/")]
        pairs = by_dir.get(directory)
        if pairs is None:
            pairs = by_dir[directory] = []
        pairs.append((sources[id(entry)] + path, dest))
    for directory in sorted({str(d.parent) for _, _, d in scripts}):
        os.makedirs(directory, exist_ok=True)
    link_many(by_dir, jobs=_cpu_jobs(jobs), progress=progress)
    rewritten = _write_scripts(scripts, python)
    out: list[InstalledDist] = []
    records: list[str] = []
    for entry in entries:
        record = layout.site / entry.dist.dist_info / "RECORD"
        if entry.dist.scripts:
            code = compiled.get(id(entry))
            _write_record(entry, record, rewritten, code[0] if code is not None else entry)
            records.append(str(record))
        digest = "sha256:" + hashlib.sha256(record.read_bytes()).hexdigest()
        out.append(attrs.evolve(entry.dist, record_digest=digest))
    made = [(str(entry.source_of(path)), str(dest)) for entry, path, dest in scripts]
    store = str(entries[0].path.parent) if entries else ""
    grouped = group_links(by_dir, store, str(layout.site.parent))
    return LinkedLayer(out, conflicts, grouped, made, records)


def _compiled(
    entries: Sequence[StoreEntry], bytecode: Mapping[str, Bytecode]
) -> dict[int, tuple[StoreEntry, Bytecode]]:
    """Each wheel entry's bytecode entry (as a source of files, and as recorded), by the
    wheel entry's identity."""
    out: dict[int, tuple[StoreEntry, Bytecode]] = {}
    for entry in entries:
        code = bytecode.get(entry.sha256)
        if code is not None:
            out[id(entry)] = (code.as_entry(entry), code)
    return out


def _resolve(
    plan: dict[str, _Source], others: Mapping[str, list[_Source]], layer: Layer
) -> list[FileConflict]:
    """For each path several distributions provide: the first in canonical name order keeps
    it (``plan`` is updated); every one whose bytes differ from the winner's is a conflict."""
    from packaging.utils import canonicalize_name

    conflicts: list[FileConflict] = []
    for dest in sorted(others):
        providers = sorted(
            [plan[dest], *others[dest]], key=lambda s: canonicalize_name(s[0].dist.name)
        )
        winner = providers[0]
        plan[dest] = winner
        for loser in providers[1:]:
            if loser[0] is winner[0] or _same_bytes(
                winner[0].source_of(winner[1]), loser[0].source_of(loser[1])
            ):
                continue
            conflicts.append(FileConflict(loser[1], winner[0].dist.name, loser[0].dist.name, layer))
    return conflicts


def _drop_shared(plan: dict[str, _Source], site: str) -> None:
    """Files bound for a directory shared with another layer (``bin``, ``data``, ``include``)
    that exist already: identical bytes are left as they are, others are an error."""
    inside = site + "/"
    for dest in [d for d in plan if not d.startswith(inside) and os.path.lexists(d)]:
        entry, path = plan[dest]
        if path.startswith("../bin/"):
            continue  # a script is compared once its shebang is rewritten (_write_scripts)
        if not _same_bytes(entry.source_of(path), Path(dest)):
            raise _replaces_native(entry, dest)
        del plan[dest]


def _replaces_native(entry: StoreEntry, dest: str) -> InstallError:
    return InstallError(
        f"{entry.dist.name} {entry.dist.version} would replace {dest}, which the native "
        "layer already provides with different contents",
        hint="the overlay never replaces the native wheel's files; remove the wheel from "
        "the overlay or pin a version that does not ship that file",
    )


def _destination_text(bases: Mapping[str, str], record_path: str) -> str:
    """Where a RECORD path (relative to the store entry's ``site``) lands in the layer."""
    if record_path.startswith("../"):
        name, _, rest = record_path[3:].partition("/")
        if rest and name in ("bin", "data", "include"):
            return f"{bases[name]}/{rest}"
    return f"{bases['site']}/{record_path}"


def _same_bytes(a: Path, b: Path) -> bool:
    import filecmp

    return filecmp.cmp(a, b, shallow=False)


def _write_scripts(scripts: list[tuple[StoreEntry, str, Path]], python: str) -> dict[str, str]:
    """Copy scripts with the generation's shebang; return dest path -> new RECORD row."""
    rows: dict[str, str] = {}
    for entry, record_path, dest in scripts:
        source = entry.source_of(record_path)
        content = with_shebang(source.read_bytes(), python)
        if dest.exists():  # written by the other layer (conflicts within a layer are resolved)
            if dest.read_bytes() != content:
                raise _replaces_native(entry, str(dest))
        else:
            dest.write_bytes(content)
            os.chmod(dest, source.stat().st_mode & 0o7777)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode().rstrip("=")
        rows[f"{entry.sha256}:{record_path}"] = f"sha256={digest}"
        rows[f"{entry.sha256}:{record_path}:size"] = str(len(content))
    return rows


def _write_record(
    entry: StoreEntry, record: Path, rewritten: Mapping[str, str], origin: StoreEntry
) -> None:
    """The entry's RECORD (as ``origin`` holds it: the wheel's entry, or its bytecode entry's
    with the ``.pyc`` rows) with the rows of its scripts rewritten (their new hash and size);
    every other line is kept as it is, byte for byte (a script's row is the only one whose
    path starts with ``../``, or is quoted)."""
    source = origin.source_of(f"{entry.dist.dist_info}/RECORD")
    lines = source.read_text(encoding="utf-8").splitlines()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for line in lines:
        if line.startswith(("../", '"')):
            for row in csv.reader([line]):
                key = f"{entry.sha256}:{row[0]}" if len(row) == 3 else ""
                if key in rewritten:
                    row = [row[0], rewritten[key], rewritten[f"{key}:size"]]
                writer.writerow(row)
        else:
            out.write(line + "\n")
    record.write_text(out.getvalue(), encoding="utf-8")
