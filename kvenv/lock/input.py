"""The profile's lock as plan and apply read it: the validated PEP 751 document, its file, and
the digest of its bytes (what the manifest records). The one reader of "the profile's lock, if it
has one", used by plan, apply, status and bundle."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvenv._util import memo
from kvenv.errors import LockError, Problem

if TYPE_CHECKING:  # the no-op apply hashes the lock file without parsing it (start-up time)
    from kvenv.lock.pylock import LockFile
    from kvenv.model.loading import LoadedProfile


@attrs.frozen
class LockInput:
    """A read lock: the validated PEP 751 document, its file and the digest of its bytes."""

    lockfile: LockFile
    path: str
    digest: str


def lock_digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of a lock file's bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str | None:
    """:func:`lock_digest_of` the file at ``path``, or None when it cannot be read."""
    try:
        return lock_digest_of(memo.read_bytes(path))
    except OSError:
        return None


def has_lock(loaded: LoadedProfile) -> bool:
    """Whether the profile has an overlay lock: it names one, or its default path exists."""
    return loaded.profile.overlay.lock is not None or loaded.lock_path.exists()


def read_lock_input(path: Path, *, profile: LoadedProfile | None = None) -> LockInput:
    """Read and validate the lock at ``path`` (a missing file names the profile's field)."""
    from kvenv.lock.pylock import read_lock

    try:
        data = memo.read_bytes(path)
    except FileNotFoundError:
        name = profile.profile.name if profile is not None else "PROFILE"
        problems = (
            [Problem("file not found", file=str(profile.path), path="$.overlay.lock")]
            if profile is not None
            else []
        )
        raise LockError(
            f"lock file not found: {path}",
            problems=problems,
            hint=f"create it with `kvenv lock {name}`, or remove [overlay] lock from the profile",
        ) from None
    return LockInput(read_lock(path), str(path), lock_digest_of(data))


def profile_lock(loaded: LoadedProfile) -> LockInput | None:
    """The profile's lock, read and validated; None for a profile without an overlay."""
    if not has_lock(loaded):
        return None
    return read_lock_input(loaded.lock_path, profile=loaded)
