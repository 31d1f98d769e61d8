"""The runtime root's layout, owned here and nowhere else.

Every name below is kvenv's; nothing else in a root is touched::

    <root>/.kvenv-root                    ownership marker (a root without it is not kvenv's)
    <root>/.kvenv.lock                    file lock serialising applies (+ .kvenv.lock.owner)
    <root>/current.json                   {"generation": ID, "previous": ID}: THE switch
    <root>/activate.sh|.fish|.ps1         activation scripts (written by kvenv.env.activation)
    <root>/generations/<ID>/native/       the native wheel (hard links from the store)
    <root>/generations/<ID>/overlay/      the overlay wheels
    <root>/generations/<ID>/bin/          console scripts, shebang = the host interpreter
    <root>/generations/<ID>/manifest.json written last: a generation without it is incomplete

Why a ``current.json`` pointer replaced with ``os.replace`` and not a ``current`` symlink:
``os.replace`` of a file is atomic on every OS and filesystem kvenv meets (Kaggle datasets and
some mounts do not keep symlinks, Windows needs privileges for them), ``reset`` refuses to
follow symlinks anywhere under the root, and activation resolves the pointer to the
generation's real directories, so a process that activated a generation keeps importing from
it while a later apply switches (that previous generation is kept until the next apply).
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from pathlib import Path

from kvenv import __version__
from kvenv._util import atomic
from kvenv.env.manifest import MANIFEST_NAME, Manifest, Pointer, read_manifest
from kvenv.errors import ConflictError, InputError, Problem
from kvenv.model import convert
from kvenv.model.locations import LOCK_NAME, ROOT_MARKER, Locations

POINTER_NAME = "current.json"
OWNER_SUFFIX = ".owner"
GENERATIONS = "generations"
OWN_NAMES = frozenset({ROOT_MARKER, LOCK_NAME, LOCK_NAME + OWNER_SUFFIX})


# -- ownership ---------------------------------------------------------------------------------


def is_owned(root: Path) -> bool:
    """Whether ``root`` carries kvenv's ownership marker."""
    return (root / ROOT_MARKER).is_file()


def claim_root(root: Path) -> None:
    """Make ``root`` a kvenv runtime root: create it, or adopt it when empty. A non-empty
    directory without the marker is someone else's and is refused."""
    if root.is_symlink() and not root.exists():
        raise ConflictError(f"runtime root is a dangling symlink: {root}")
    if root.exists() and not root.is_dir():
        raise ConflictError(
            f"runtime root is not a directory: {root}", hint="choose another --root"
        )
    if is_owned(root):
        return
    if root.exists():
        foreign = sorted(p.name for p in root.iterdir() if p.name not in OWN_NAMES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise ConflictError(
                f"refusing to use non-empty directory {root}: it was not created by kvenv "
                f"(contains {shown})",
                hint="choose an empty or new --root; kvenv never overwrites directories it "
                "does not own",
            )
    root.mkdir(parents=True, exist_ok=True)
    atomic.write_json(root / ROOT_MARKER, {"kvenv": __version__, "created_at": now()})


def now() -> str:
    """The current UTC time as ISO 8601, to the second (what markers and manifests record)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# -- the root lock -----------------------------------------------------------------------------


def owner_file(locations: Locations) -> Path:
    """The sidecar naming the holder of the root lock (present while an apply runs)."""
    return locations.lock.with_name(locations.lock.name + OWNER_SUFFIX)


class RootLock:
    """``filelock`` on ``<root>/.kvenv.lock``; the holder's pid and host in a sidecar file."""

    def __init__(self, locations: Locations, *, wait: bool, on_wait: Callable[[str], None]):
        self.path = locations.lock
        self.owner = owner_file(locations)
        self.wait = wait
        self.on_wait = on_wait
        self._lock: object | None = None

    def holder(self) -> str:
        try:
            return self.owner.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def __enter__(self) -> RootLock:
        import socket

        from filelock import FileLock, Timeout

        lock = FileLock(str(self.path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if not self.wait:
                raise ConflictError(
                    f"another kvenv apply holds {self.path} ({self.holder()})",
                    hint="wait for it to finish, or run without --no-wait to queue",
                ) from None
            self.on_wait(f"waiting for another kvenv apply on this root ({self.holder()})")
            lock.acquire()
        self._lock = lock
        self.owner.write_text(f"pid {os.getpid()} on {socket.gethostname()}\n", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        from filelock import FileLock

        lock = self._lock
        if isinstance(lock, FileLock):
            self.owner.unlink(missing_ok=True)
            lock.release()


# -- generations -------------------------------------------------------------------------------


def new_generation_id() -> str:
    """A fresh, sortable generation id: ``YYYYmmddTHHMMSS-<6 hex>``."""
    import secrets

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def _is_generation_id(name: str) -> bool:
    stamp, _, tail = name.partition("-")
    return len(stamp) == 15 and stamp[8] == "T" and len(tail) == 6 and tail.isalnum()


def generation_dir(root: Path, generation: str) -> Path:
    """The directory of ``generation`` under ``root``."""
    return root / GENERATIONS / generation


def manifest_path(root: Path, generation: str) -> Path:
    """Where the manifest of ``generation`` lives."""
    return generation_dir(root, generation) / MANIFEST_NAME


def list_generations(locations: Locations) -> list[str]:
    """The generation directories of the root, oldest first."""
    base = locations.generations
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and _is_generation_id(p.name))


def remove_generations(locations: Locations, keep: set[str], *, incomplete_only: bool) -> list[str]:
    """Remove kvenv's generation directories not in ``keep`` (only those without a manifest
    when ``incomplete_only``). Never follows symlinks."""
    import shutil

    removed: list[str] = []
    for name in list_generations(locations):
        if name in keep:
            continue
        path = generation_dir(locations.root, name)
        if path.is_symlink():
            continue
        if incomplete_only and (path / MANIFEST_NAME).exists():
            continue
        shutil.rmtree(path)
        removed.append(name)
    return removed


# -- the pointer -------------------------------------------------------------------------------


def read_pointer(root: Path) -> Pointer | None:
    """The current-generation pointer of ``root``, or None when nothing was applied."""
    path = root / POINTER_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read {path}: {exc}", hint="run `kvenv reset` then `kvenv apply`"
        ) from None
    pointer = convert.structure(data, Pointer, file=str(path), what="generation pointer")
    if "/" in pointer.generation or pointer.generation.startswith("."):
        raise InputError(
            f"invalid generation pointer: {path}",
            problems=[Problem("not a generation id", file=str(path), path="$.generation")],
        )
    return pointer


def switch(locations: Locations, generation: str, previous: str | None) -> None:
    """The one atomic state change: replace ``current.json``."""
    data = {"schema": 1, "generation": generation, "previous": previous}
    atomic.write_json(locations.root / POINTER_NAME, data)


def current_manifest_path(root: Path) -> Path | None:
    """The manifest file of the current generation, or None when nothing was applied."""
    pointer = read_pointer(root)
    if pointer is None:
        return None
    return manifest_path(root, pointer.generation)


def current_manifest(root: Path) -> Manifest | None:
    """The manifest of the current generation of ``root``, or None when nothing was applied."""
    path = current_manifest_path(root)
    if path is None:
        return None
    return read_manifest(path, root=root)


def current_state(locations: Locations) -> tuple[Pointer | None, Manifest | None]:
    """The pointer and the current manifest of the root (both None when nothing is applied)."""
    pointer = read_pointer(locations.root)
    if pointer is None:
        return None, None
    path = manifest_path(locations.root, pointer.generation)
    return pointer, read_manifest(path, root=locations.root)


def dirs_present(manifest: Manifest) -> bool:
    """Whether the generation's native, overlay and bin directories all exist."""
    dirs = manifest.dirs
    return all(os.path.isdir(d) for d in (dirs.native, dirs.overlay, dirs.bin))
