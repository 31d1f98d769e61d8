"""What the records of the start-up paths (issue 13) are keyed by: a small file's sha256, a
file's or directory's stat identity, and kvenv's own code. One definition for every record
(profile facts, recalled answers, lock checks, host memo), standard library only.

- :func:`small_sha256`: the bytes of a small file (a profile, a pointer, a manifest, a marker),
  read whole and hashed with CPython's own sha256 (:mod:`kvenv._util.smallhash`).
- :func:`stat_identity`: device, inode, size, mtime and ctime. A directory's mtime moves when an
  entry is added, removed or renamed in it; a file edited in place with its size and mtime set
  back still moves its ctime, which no user-level call can set.
- :func:`stamp`: ``[path, *stat_identity]``, or ``[path, None]`` for a path that is not there.
- :func:`code_identity`: kvenv's modules (the package root's and the named subpackages') by
  path, size, mtime and inode: a record written by another kvenv (another rule) never matches.
  kvenv run from a single-file bundle (a zip archive) is identified by the archive's stamp.
"""

from __future__ import annotations

import os

from kvenv._util.smallhash import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_sha256(path: str | os.PathLike[str]) -> str | None:
    """The sha256 (hex) of the file at ``path``, read whole; None when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            return sha256_hex(stream.read())
    except OSError:
        return None


def stat_identity(path: str | os.PathLike[str]) -> list[int] | None:
    """[device, inode, size, mtime_ns, ctime_ns] of ``path`` (followed); None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stamp(path: str) -> list[Any]:
    """``[path, device, inode, size, mtime_ns, ctime_ns]``, or ``[path, None]``."""
    identity = stat_identity(path)
    return [path, None] if identity is None else [path, *identity]


def code_identity(*subpackages: str) -> list[list[Any]]:
    """Every ``.py`` module directly in kvenv's package and in each of ``subpackages``
    (every subpackage, recursively, when none is named), by path, size, mtime and inode."""
    archive = archive_stamp()
    if archive is not None:
        return [archive]
    directories = [_PACKAGE, *(os.path.join(_PACKAGE, s) for s in subpackages)]
    recursive = not subpackages
    found: list[list[Any]] = []
    while directories:
        directory = directories.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                found.append([entry.path, st.st_size, st.st_mtime_ns, st.st_ino])
            elif recursive and entry.name != "__pycache__" and entry.is_dir():
                directories.append(entry.path)
    return sorted(found)


def archive_stamp() -> list[Any] | None:
    """The :func:`stamp` of the zip archive kvenv runs from (a single-file bundle), or None
    when kvenv's package is a directory."""
    if os.path.isdir(_PACKAGE):
        return None
    path = _PACKAGE
    while path and not os.path.isfile(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return stamp(path) if path else None
