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

import base64
import csv
import hashlib
import json
import os
import stat
from pathlib import Path

import attrs

from kvenv._util import atomic

SEAL = ".kvenv-seal.json"
# 2: directories are recorded by ctime (and the top by its names) instead of being listed on
# every check; a format 1 seal reads as broken, so the entry is verified in full and sealed again.
SEAL_FORMAT = 2
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _walk(root: Path) -> tuple[list[str], list[str]]:
    """Every file and directory under ``root`` (relative, sorted), the seal and marker files
    of the entry itself excluded."""
    files: list[str] = []
    dirs: list[str] = []
    for current, subdirs, names in os.walk(root):
        rel = os.path.relpath(current, root)
        prefix = "" if rel == "." else rel + "/"
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
    record: dict[str, list[int]] = {}
    for rel in files:
        path = root / rel
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_mode & _WRITE_BITS:
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~_WRITE_BITS)
            info = os.lstat(path)
        record[rel] = [info.st_size, stat.S_IMODE(info.st_mode), info.st_mtime_ns]
    for rel in reversed(dirs):
        path = root / rel
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~_WRITE_BITS)
    changed = {rel: os.lstat(root / rel).st_ctime_ns for rel in dirs}
    document = {
        "format": SEAL_FORMAT,
        "files": record,
        "dirs": changed,
        "top": _top_names(os.fspath(root)),
    }
    atomic.write_json(root / SEAL, document, durable=False, mode=0o444)
    os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) & ~_WRITE_BITS)


@attrs.frozen
class SealBreak:
    """How an entry differs from its seal: ``kind`` is ``seal`` (no readable seal), ``added``,
    ``removed``, ``size``, ``mode``, ``mtime`` or ``dir`` (a directory's ctime: an entry of it
    added, removed or renamed); ``path`` is the file or directory concerned."""

    path: Path
    kind: str

    @property
    def message(self) -> str:
        what = {
            "seal": "has no readable seal",
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
    try:
        data = json.loads((root / SEAL).read_text(encoding="utf-8"))
        recorded, changed, top = data["files"], data["dirs"], data["top"]
        if data.get("format") != SEAL_FORMAT or not (
            isinstance(recorded, dict) and isinstance(changed, dict) and isinstance(top, list)
        ):
            return SealBreak(root / SEAL, "seal")
    except (OSError, ValueError, KeyError, TypeError):
        return SealBreak(root / SEAL, "seal")
    base = os.fspath(root)
    lstat = os.lstat
    try:
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
