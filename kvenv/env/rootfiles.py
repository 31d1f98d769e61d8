"""The files that make a runtime root kvenv's, written the one way every apply writes them: the
ownership marker, the root lock (with its owner sidecar), generation ids and the pointer switch.
:mod:`kvenv.env.root` (the full path) and :mod:`kvenv.env.recall` (a warm apply recalled) both
call these; this module imports only the standard library and :mod:`kvenv._util.atomic`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from kvenv import __version__
from kvenv._util import atomic
from kvenv.errors import ConflictError
from kvenv.model.places import LOCK_NAME, ROOT_MARKER

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Callable

POINTER_NAME = "current.json"
GENERATIONS = "generations"
MANIFEST_FILE = "manifest.json"  # kvenv.env.manifest.MANIFEST_NAME (a test holds them equal)
KVENV_LIB = "kvenv-lib"  # a generation's links to kvenv's own package (kvenv.env.kvenvlib)


def now() -> str:
    """The current UTC time as ISO 8601, to the second (what markers and manifests record)."""
    import datetime  # here: activate and status read the root, they stamp nothing

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_marker(root: Path, owner: tuple[str, str | None] | None, created_at: str | None) -> None:
    """The ownership marker of ``root``: kvenv's version, when the root was created and (once
    settled under the root lock) the profile it belongs to, as ``(name, resolved file)``. A
    claim (``owner`` None) never replaces a marker already there: it may name the owner
    another apply recorded meanwhile (FileExistsError)."""
    data: dict[str, object] = {"kvenv": __version__, "created_at": created_at or now()}
    if owner is not None:
        data["owner"] = {"name": owner[0], "file": owner[1]}
    atomic.write_json(root / ROOT_MARKER, data, exclusive=owner is None)


def unclaim_root(root: Path, *, remove_dir: bool) -> bool:
    """Give up a claimed ``root`` in which nothing was ever applied (no pointer, no finished
    generation), after a first apply failed: remove kvenv's own files there (the marker, the
    lock and its owner, unfinished generations, stray temporary files) and, with
    ``remove_dir``, the root directory itself when it is empty then. Nothing else is touched;
    False (and nothing removed) when the root holds an applied or finished generation."""
    import contextlib
    import shutil

    generations = root / GENERATIONS
    if (root / POINTER_NAME).exists():
        return False
    try:
        made = [p for p in generations.iterdir() if not p.is_symlink() and p.is_dir()]
    except FileNotFoundError:
        made = []
    except OSError:
        return False
    if any((p / MANIFEST_FILE).exists() for p in made):
        return False
    for path in made:
        shutil.rmtree(path, ignore_errors=True)
    own = {ROOT_MARKER, LOCK_NAME, LOCK_NAME + ".owner"}
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in names:
        temp = name.startswith(f".{ROOT_MARKER}.") and name.endswith(".tmp")
        if name in own or temp:
            with contextlib.suppress(OSError):
                os.unlink(root / name)
    for directory in [generations, root] if remove_dir else [generations]:
        with contextlib.suppress(OSError):  # not empty: what is not kvenv's stays, and its dir
            os.rmdir(directory)
    return True


def new_generation_id() -> str:
    """A fresh, sortable generation id: ``YYYYmmddTHHMMSS-<6 hex>``."""
    import datetime

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{os.urandom(3).hex()}"  # what secrets.token_hex(3) returns


def write_pointer(root: Path, generation: str, previous: str | None) -> None:
    """The one atomic state change: replace ``current.json``, recording the sha256 of the
    generation's manifest (written, durably, before the switch)."""
    digest = file_sha256(root / GENERATIONS / generation / MANIFEST_FILE)
    data = {
        "schema": 1,
        "generation": generation,
        "previous": previous,
        "manifest_sha256": digest,
        "kvenv_version": __version__,
    }
    atomic.write_json(root / POINTER_NAME, data)


def file_sha256(path: Path) -> str | None:
    """The sha256 of the file's bytes (what the pointer records of a manifest), or None when
    it does not exist."""
    import hashlib

    try:
        from kvenv._util import memo

        return hashlib.sha256(memo.read_bytes(path)).hexdigest()
    except FileNotFoundError:
        return None


class PathLock:
    """An exclusive ``flock`` of a root's lock file (what ``filelock`` takes on POSIX, so an
    older kvenv and this one exclude each other); the holder's pid and host in a sidecar file.
    Where ``flock`` is not supported (some network filesystems), or off POSIX, ``filelock``
    itself, which has a fallback there."""

    def __init__(self, path: Path, owner: Path, *, wait: bool, on_wait: Callable[[str], None]):
        self.path = path
        self.owner = owner
        self.wait = wait
        self.on_wait = on_wait
        self._fd: int | None = None
        self._lock: object | None = None

    def holder(self) -> str:
        try:
            return self.owner.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def _busy(self) -> None:
        if not self.wait:
            raise ConflictError(
                f"another kvenv apply holds {self.path} ({self.holder()})",
                hint="wait for it to finish, or run without --no-wait to queue",
            ) from None
        self.on_wait(f"waiting for another kvenv apply on this root ({self.holder()})")

    def __enter__(self) -> PathLock:
        if not self._flock():
            self._filelock()
        host = os.uname().nodename if hasattr(os, "uname") else "unknown"
        self.owner.write_text(f"pid {os.getpid()} on {host}\n", encoding="utf-8")
        return self

    def _flock(self) -> bool:
        """Take the lock with ``flock``; False where it is not supported here."""
        try:
            import fcntl
        except ImportError:
            return False
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._busy()
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOLCK):
                return False
            raise
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def _filelock(self) -> None:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            self._busy()
            lock.acquire()
        self._lock = lock

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            import fcntl

            self.owner.unlink(missing_ok=True)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            return
        from filelock import FileLock

        lock = self._lock
        if isinstance(lock, FileLock):
            self.owner.unlink(missing_ok=True)
            lock.release()
