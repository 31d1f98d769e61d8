"""Sealing store entries, so that a generation cannot silently corrupt the store.

Generations are hard links into the store: editing an installed file edits the store's copy.
So an entry, once unpacked and verified, is *sealed*: every file and directory made read-only,
and ``.kvenv-seal.json`` records each file's size, mode and mtime, each directory's ctime and
the names at the entry's top. Reusing an entry costs one ``stat`` per file and per directory
against that record (:func:`seal_problem`; no directory is listed but the top: a file added,
removed or renamed anywhere changes its directory's ctime, which no ``touch`` can set back);
an entry whose files changed in any way is verified again in full against its RECORD
(:func:`record_problems`) and, if its bytes differ, is never linked again: it is removed and
unpacked anew from the verified wheel. Read-only modes stop accidental writes by other users;
root ignores them, which is why the record, not the mode, is what is checked.
"""

from __future__ import annotations

import array
import base64
import hashlib
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from kvenv._util import atomic, jsonio

SEAL = ".kvenv-seal.json"
# 2: directories are recorded by ctime (and the top by its names) instead of being listed on
# every check; a seal of an older format reads as broken, so the entry is verified in full and
# sealed again.
# 3: the numbers are packed (little-endian int64, base64) beside the lists of names: a warm
# apply reads every seal, and parsing a JSON list per file cost more than the checks.
SEAL_FORMAT = 3
_OLDER_FORMATS = (1, 2)
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _walk(root: Path) -> tuple[list[str], list[str]]:
    """Every file and directory under ``root`` (relative, sorted), the seal and marker files
    of the entry itself excluded."""
    files: list[str] = []
    dirs: list[str] = []
    cut = len(os.fspath(root)) + 1  # os.walk's paths all start with root and a "/"
    for current, subdirs, names in os.walk(os.fspath(root)):
        prefix = current[cut:] + "/" if len(current) >= cut else ""
        dirs.extend(prefix + d for d in subdirs)
        files.extend(prefix + n for n in names if not (prefix == "" and n.startswith(".kvenv-")))
    return sorted(files), sorted(dirs)


def _top_names(base: str) -> list[str]:
    """The names at the top of an entry (``site``, ``bin``, ...), its own ``.kvenv-`` files
    left out: the top is renamed into place after sealing, so its ctime cannot be kept."""
    return sorted(n for n in os.listdir(base) if not n.startswith(".kvenv-"))


def seal(root: Path) -> None:
    """Make every file and directory of the entry at ``root`` read-only and record each file's
    size, mode and mtime, each directory's ctime (taken once it is read-only) and the names at
    the top in ``root/.kvenv-seal.json`` (written last)."""
    files, dirs = _walk(root)
    base = os.fspath(root)
    lstat, chmod = os.lstat, os.chmod  # plain string paths: this runs once per unpacked file
    numbers: list[int] = []
    for rel in files:
        path = f"{base}/{rel}"
        info = lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_mode & _WRITE_BITS:
            chmod(path, stat.S_IMODE(info.st_mode) & ~_WRITE_BITS)
            info = lstat(path)
        numbers += (info.st_size, info.st_mode & 0o7777, info.st_mtime_ns)
    for rel in reversed(dirs):
        path = f"{base}/{rel}"
        chmod(path, lstat(path).st_mode & 0o7777 & ~_WRITE_BITS)
    document = {
        "format": SEAL_FORMAT,
        "files": files,
        "stats": _pack(numbers),
        "dirs": dirs,
        "ctimes": _pack(lstat(f"{base}/{rel}").st_ctime_ns for rel in dirs),
        "top": _top_names(os.fspath(root)),
    }
    atomic.write_json(root / SEAL, document, durable=False, mode=0o444)
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) & ~_WRITE_BITS)


class SealBreak:
    """How an entry differs from its seal: ``kind`` is ``seal`` (no readable seal), ``old`` (a
    seal of an older format: the entry is checked against its RECORD and sealed anew),
    ``added``, ``removed``, ``size``, ``mode``, ``mtime`` or ``dir`` (a directory's ctime: an
    entry of it added, removed or renamed); ``path`` is the file or directory concerned."""

    __slots__ = ("kind", "path")

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SealBreak):
            return NotImplemented
        return (self.path, self.kind) == (other.path, other.kind)

    def __hash__(self) -> int:
        return hash((self.path, self.kind))

    def __repr__(self) -> str:
        return f"SealBreak(path={self.path!r}, kind={self.kind!r})"

    @property
    def message(self) -> str:
        what = {
            "seal": "has no readable seal",
            "old": "was written by an older kvenv (its files are checked against RECORD)",
            "added": "was added after sealing",
            "removed": "was removed after sealing",
            "size": "changed size after sealing",
            "mode": "changed mode after sealing",
            "mtime": "was modified after sealing",
            "dir": "had a file added, removed or renamed in it (or its mode changed) after sealing",
        }[self.kind]
        return f"{self.path} {what}"


def seal_problem(root: Path) -> SealBreak | None:
    """How the entry at ``root`` no longer matches its seal (a file added, removed, resized,
    re-moded or touched), or None when it matches. One ``stat`` per file and per directory, by
    plain string paths, and one listing of the top: this runs for every file of every entry a
    warm apply links."""
    document = _read_seal(root)
    if isinstance(document, SealBreak):
        return document
    recorded, changed, top = document
    base = os.fspath(root)
    lstat = os.lstat
    for rel, (size, mode, mtime) in recorded.items():
        try:
            info = lstat(f"{base}/{rel}")
        except OSError:
            return SealBreak(root / rel, "removed")
        if info.st_size != size:
            return SealBreak(root / rel, "size")
        if info.st_mode & 0o7777 != mode:
            return SealBreak(root / rel, "mode")
        if info.st_mtime_ns != mtime:
            return SealBreak(root / rel, "mtime")
    return _frame_problem(root, changed, top)


def sealed_files(root: Path) -> dict[str, tuple[int, int, int]] | SealBreak:
    """The seal of the entry at ``root`` checked except for its files (the seal readable and
    of this format, every directory's ctime, the names at the top): what it records of each
    file (relative path -> size, mode, mtime), for the caller to check each one right before
    it uses it (the recall of a warm apply checks each as it links it:
    :func:`kvenv.env.linking.link_checked`); or how it is broken."""
    document = _read_seal(root)
    if isinstance(document, SealBreak):
        return document
    recorded, changed, top = document
    broken = _frame_problem(root, changed, top)
    return recorded if broken is None else broken


def _pack(numbers: Iterable[int]) -> str:
    """Integers as base64 of little-endian int64s (:func:`_unpack` reads them)."""
    packed = array.array("q", numbers)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack(text: str) -> array.array[int]:
    packed = array.array("q", base64.b64decode(text.encode("ascii"), validate=True))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed


def _read_seal(
    root: Path,
) -> tuple[dict[str, tuple[int, int, int]], dict[str, int], list[str]] | SealBreak:
    """The seal of the entry at ``root``: each file's (size, mode, mtime), each directory's
    ctime, the names at the top; a :class:`SealBreak` when it is missing, unreadable, of
    another format or of the wrong shape."""
    try:
        data = jsonio.loads_json((root / SEAL).read_bytes(), file=f"{root}/{SEAL}")
        if isinstance(data, dict) and data.get("format") in _OLDER_FORMATS:
            return SealBreak(root / SEAL, "old")
        files, dirs, top = data["files"], data["dirs"], data["top"]
        if data.get("format") != SEAL_FORMAT or not (
            isinstance(files, list) and isinstance(dirs, list) and isinstance(top, list)
        ):
            return SealBreak(root / SEAL, "seal")
        stats, ctimes = _unpack(data["stats"]), _unpack(data["ctimes"])
        if len(stats) != 3 * len(files) or len(ctimes) != len(dirs):
            return SealBreak(root / SEAL, "seal")
        numbers = iter(stats)
        recorded = dict(zip(files, zip(numbers, numbers, numbers, strict=True), strict=True))
        changed = dict(zip(dirs, ctimes, strict=True))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return SealBreak(root / SEAL, "seal")
    return recorded, changed, top


def _frame_problem(root: Path, changed: dict[str, int], top: list[str]) -> SealBreak | None:
    """Every directory's ctime and the names at the top against the seal (no listing but the
    top: a file added, removed or renamed anywhere changes its directory's ctime)."""
    base = os.fspath(root)
    lstat = os.lstat
    try:
        for rel, ctime in changed.items():
            try:
                info = lstat(f"{base}/{rel}")
            except OSError:
                return SealBreak(root / rel, "removed")
            if info.st_ctime_ns != ctime or not stat.S_ISDIR(info.st_mode):
                return SealBreak(root / rel, "dir")
        names = _top_names(base)
    except (TypeError, ValueError):
        return SealBreak(root / SEAL, "seal")  # a record of the wrong shape
    except OSError:
        return SealBreak(root, "removed")
    if names != top:
        added = sorted(set(names) - set(top))
        return SealBreak(
            root / (added or sorted(set(top) - set(names)))[0], "added" if added else "removed"
        )
    return None


def record_problems(site: Path, dist_info: str) -> list[str]:
    """Every file of the RECORD ``site/dist_info/RECORD`` whose bytes (sha256 and size) differ
    from it, or that is missing; the full check behind a broken seal."""
    import csv  # the full check only

    record = site / dist_info / "RECORD"
    try:
        rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError):
        return [f"{record} is missing or unreadable"]
    problems: list[str] = []
    for row in rows:
        if len(row) != 3 or not row[1]:
            continue
        algorithm, _, value = row[1].partition("=")
        if algorithm not in hashlib.algorithms_available:
            continue
        path = Path(os.path.normpath(site / row[0]))
        digest = hashlib.new(algorithm)
        try:
            with open(path, "rb", buffering=0) as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
            size = path.stat().st_size
        except OSError:
            problems.append(f"{path} is missing or unreadable")
            continue
        actual = base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
        if actual != value or (row[2] and str(size) != row[2]):
            problems.append(f"{path} differs from its RECORD")
    return problems


def remove_sealed(path: Path) -> None:
    """Remove a (possibly sealed) tree: directories are made writable again first."""
    import shutil

    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    _unseal_dirs(path)
    shutil.rmtree(path)


def publish_sealed(temp: Path, final: Path) -> bool:
    """Rename the sealed tree ``temp`` into place as the store entry ``final``. False, with
    ``temp`` removed, when another process finished the same entry first (``final`` is
    there: the rename found it not empty)."""
    import errno

    try:
        os.rename(temp, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        remove_sealed(temp)  # another process finished the same entry first
        return False
    return True


def reseal(root: Path) -> None:
    """Seal the entry at ``root`` again from its files as they are now (they were verified
    against its RECORD: a ``touch`` or a mode change, not a change of bytes)."""
    _unseal_dirs(root)
    (root / SEAL).unlink(missing_ok=True)
    seal(root)


def _unseal_dirs(root: Path) -> None:
    """Make every directory under ``root`` writable again (its files keep their modes)."""
    for current, _subdirs, _names in os.walk(root):
        os.chmod(current, stat.S_IMODE(os.lstat(current).st_mode) | stat.S_IWUSR | stat.S_IXUSR)
