"""What a locked wheel would put on the import path, read from its file list when the wheel is
at hand (a wheelhouse file, a path in the lock, or the artifact cache): a wheel that ships a
protected package's import name (``torch/``, ``torch.py``, ``torch-*.dist-info``) is refused
at lock time and reported by ``kvenv lock --check``, not only when apply unpacks it."""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from kvenv._util.importnames import import_name_of, protected_import_names

# (sha256, file name, size) -> the verified wheel file, if this machine has it
WheelAtHand = Callable[[str, str, int | None], Path | None]

_SITE_SCHEMES = ("purelib", "platlib")


def protected_entries(path: Path, protected: Iterable[str]) -> tuple[str, ...]:
    """The top-level entries of the wheel at ``path`` (its file list only; nothing is
    extracted) that would land in a protected distribution's import names. A file that is not
    a readable zip gives none: the installer's own checks report it."""
    names = protected_import_names(protected)
    if not names:
        return ()
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return ()
    found: set[str] = set()
    for member in members:
        first, _, rest = member.partition("/")
        if first.endswith(".data"):
            scheme, _, inner = rest.partition("/")
            if scheme not in _SITE_SCHEMES or not inner:
                continue
            first, _, rest = inner.partition("/")
        if first and import_name_of(first) in names:
            found.add(first + "/" if rest or member.endswith("/") else first)
    return tuple(sorted(found))


def sized_file(path: Path, size: int | None) -> Path | None:
    """``path`` when it is a file of this size. Only its file list is read here, so it is not
    hashed (a lock of large wheels is checked in a blink); apply checks every byte against the
    lock's sha256 before it installs anything."""
    try:
        if path.is_file() and (size is None or path.stat().st_size == size):
            return path
    except OSError:
        pass
    return None


def protected_message(filename: str, entries: tuple[str, ...]) -> str:
    shown = ", ".join(repr(e) for e in entries)
    return (
        f"{filename} ships {shown}, the import name of a protected host package; "
        "installing it would shadow the host's package"
    )


PROTECTED_FIX = (
    "keep that wheel out of the lock: pin another version of it (`--constraint FILE`), or "
    "remove or waive the requirement that pulls it in ([[host.waivers]]); then relock"
)
