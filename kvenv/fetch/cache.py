"""The content-addressed artifact cache.

Layout under the cache root::

    artifacts-v1/sha256/<aa>/<hex>/<filename>     the verified file, read-only
    artifacts-v1/sha256/<aa>/<hex>/.verified      {"size", "mtime_ns", "ino"} at verification
    artifacts-v1/tmp/<...>.part                   downloads in flight (same filesystem)

A file enters only through :meth:`ArtifactCache.commit`: written to ``tmp/``, its sha256 and
size checked, then ``os.replace``d into its entry, so a reader never sees a partial file and a
kill leaves at most a stray ``.part`` (swept after a day).

Re-verification of a cached file is cheap by default: its size, mtime and inode must equal the
``.verified`` marker written right after the full hash check (the file is made read-only; the
marker is written through :mod:`kvenv._util.atomic`). A file that was touched in place no
longer matches and is re-hashed; ``rehash=True`` re-hashes every time. Re-hashing costs about
a second per 2 GB; the marker check costs one ``stat``, which keeps a warm apply of a 1 GB
overlay instant. A cached file that fails re-hashing is removed and fetched again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from kvenv._util import atomic, jsonio, memo
from kvenv._util.hashing import HashingWriter, sha256_file

_LAYOUT = "artifacts-v1"
_MARKER = ".verified"
STALE_PART_SECONDS = 24 * 3600


class ArtifactCache:
    """One cache root. Safe for concurrent threads and processes (atomic renames only)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.base = self.root / _LAYOUT
        self.tmp = self.base / "tmp"

    def prepare(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._sweep()

    def entry(self, sha256: str) -> Path:
        return self.base / "sha256" / sha256[:2] / sha256

    def has(self, sha256: str) -> bool:
        """Whether there is an entry for ``sha256`` (noted for the memo's recording seam)."""
        path = str(self.entry(sha256))
        memo.note("isdir", path)
        return os.path.isdir(path)

    def lookup(
        self, sha256: str, size: int | None, filename: str | None, *, rehash: bool
    ) -> Path | None:
        """The verified cached file for ``sha256`` (named ``filename`` when given), or None."""
        found = self._candidate(sha256, filename)
        if found is None:
            return None
        if not rehash and self._marker_matches(found, size):
            return self._named(found, filename)
        actual, actual_size = sha256_file(found)
        if actual != sha256 or (size is not None and actual_size != size):
            self._evict(found.parent)
            return None
        self._write_marker(found)
        return self._named(found, filename)

    def check(self, sha256: str, *, rehash: bool) -> str | None:
        """Why the cached file of ``sha256`` is not sound, or None when it is (or is absent).
        Cheap: a file whose marker matches is sound; one that changed since it was verified is
        re-hashed (``rehash`` re-hashes every file). Changes nothing."""
        found = self._candidate(sha256, None)
        if found is None:
            return None
        if not rehash and self._marker_matches(found, None):
            return None
        actual, _ = sha256_file(found)
        if actual != sha256:
            return f"cached {found} is damaged: sha256 {actual}, pinned {sha256}"
        return None

    def cached(self) -> list[str]:
        """The sha256 of every entry in the cache."""
        base = self.base / "sha256"
        if not base.is_dir():
            return []
        return sorted(p.name for d in base.iterdir() if d.is_dir() for p in d.iterdir())

    @contextlib.contextmanager
    def writer(self, label: str, size: int | None) -> Iterator[tuple[HashingWriter, Path]]:
        """A temporary file in the cache, hashed as it is written; removed unless committed."""
        fd, name = tempfile.mkstemp(dir=self.tmp, suffix=".part")
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as raw:
                yield HashingWriter(raw, limit=size, label=label), path
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    def temp_dir(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.tmp, suffix=".d"))

    def commit(self, part: Path, sha256: str, filename: str) -> Path:
        """Move a verified temporary file into its entry and mark it verified."""
        entry = self.entry(sha256)
        entry.mkdir(parents=True, exist_ok=True)
        final = entry / filename
        os.chmod(part, 0o444)
        os.replace(part, final)
        self._write_marker(final)
        return final

    # -- internals ----------------------------------------------------------------------------

    def _candidate(self, sha256: str, filename: str | None) -> Path | None:
        """The file in the entry of ``sha256`` (the one named ``filename`` when it is there),
        or None when there is no entry or it holds no file."""
        entry = self.entry(sha256)
        if not entry.is_dir():
            return None
        if filename is not None:
            exact = entry / filename
            if exact.is_file():
                return exact
        for child in sorted(entry.iterdir()):
            if child.name != _MARKER and child.is_file() and not child.name.startswith("."):
                return child
        return None

    def _named(self, found: Path, filename: str | None) -> Path:
        """The same bytes under the requested name (a hard link in the same entry)."""
        if filename is None or found.name == filename:
            return found
        target = found.with_name(filename)
        try:
            os.link(found, target)
        except FileExistsError:
            pass
        except OSError:  # no hard links on this filesystem: a streamed copy, renamed into place
            fd, name = tempfile.mkstemp(dir=self.tmp, suffix=".part")
            os.close(fd)
            part = Path(name)
            try:
                shutil.copyfile(found, part)
                os.chmod(part, 0o444)
                os.replace(part, target)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
        return target

    def _marker_matches(self, path: Path, size: int | None) -> bool:
        try:
            stat = path.stat()
        except OSError:
            return False
        if size is not None and stat.st_size != size:
            return False
        return _recorded(path.parent / _MARKER).get(path.name) == _identity(stat)

    def _write_marker(self, path: Path) -> None:
        marker = path.parent / _MARKER
        recorded = _recorded(marker)
        recorded[path.name] = _identity(path.stat())
        # Not fsynced: a marker lost in a crash only costs one re-hash of the file.
        atomic.write_text(marker, json.dumps(recorded), durable=False)

    def _evict(self, entry: Path) -> None:
        for child in entry.iterdir():
            with contextlib.suppress(FileNotFoundError):
                child.unlink()
        with contextlib.suppress(OSError):
            entry.rmdir()

    def _sweep(self) -> None:
        cutoff = time.time() - STALE_PART_SECONDS
        for child in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                if child.stat().st_mtime < cutoff:
                    if child.is_dir():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink()


def _recorded(marker: Path) -> dict[str, object]:
    """The records of a ``.verified`` marker by file name ({} when it is missing, unreadable or
    not a table)."""
    try:
        recorded = jsonio.loads_json(marker.read_text(), file=str(marker))
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _identity(stat: os.stat_result) -> dict[str, int]:
    """What a marker records of a verified file. Not kvenv._util.identity.of_stat: the ctime is
    left out on purpose, since a second name for the same bytes (_named: a hard link) moves it
    without changing a byte."""
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ino": stat.st_ino}


def default_cache_root() -> Path:
    """``$KVENV_CACHE_DIR``, else the user cache directory (shared with the lock engine)."""
    from kvenv.model.locations import default_cache_dir

    return default_cache_dir()
