"""File identity and small-input hashing: the one definition every record and seal uses
(the memo, :mod:`kvenv._util.memo`; the store's seals; the artifact cache; bundle seals),
standard library only.

- :func:`sha256_hex`: sha256 of small inputs (a profile, a pointer, a manifest, a record key)
  with CPython's own sha256 module (``_sha2`` from 3.12, ``_sha256`` before): the same digests
  as ``hashlib``, without loading OpenSSL (``import hashlib`` costs 2 to 3 ms at every start
  of a command). Large files (wheels, bundles) are hashed by :mod:`kvenv._util.hashing`.
- :func:`small_sha256`: the bytes of a small file, read whole and hashed.
- :func:`stat_identity`: device, inode, size, mtime and ctime. A directory's mtime moves when an
  entry is added, removed or renamed in it; a file edited in place with its size and mtime set
  back still moves its ctime, which no user-level call can set.
- :func:`stamp`: ``[path, *stat_identity]``, or ``[path, None]`` for a path that is not there.
- :func:`code_digest`: kvenv's code as a whole (every module by path, size, mtime and inode),
  once per process: a record written by another kvenv (another rule) never matches. kvenv run
  from a single-file bundle (a zip archive) is identified by the archive's stamp.
"""

from __future__ import annotations

import importlib
import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHA256: Callable[[bytes], Any] | None = None
_CODE: str | None = None


def _constructor() -> Callable[[bytes], Any]:
    global _SHA256
    if _SHA256 is None:
        for name in ("_sha2", "_sha256"):
            try:
                _SHA256 = importlib.import_module(name).sha256
                break
            except (ImportError, AttributeError):
                continue
        else:
            import hashlib

            _SHA256 = hashlib.sha256
    return _SHA256


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data``, as 64 lowercase hex characters (``hashlib.sha256``'s)."""
    return str(_constructor()(data).hexdigest())


def small_sha256(path: str | os.PathLike[str]) -> str | None:
    """The sha256 (hex) of the file at ``path``, read whole; None when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            return sha256_hex(stream.read())
    except OSError:
        return None


def of_stat(st: os.stat_result) -> list[int]:
    """A file's identity: [device, inode, size, mtime_ns, ctime_ns] of its ``stat``. Any write
    moves the ctime, which no user-level call sets back."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stat_identity(path: str | os.PathLike[str]) -> list[int] | None:
    """:func:`of_stat` of ``path`` (followed); None when absent."""
    try:
        return of_stat(os.stat(path))
    except OSError:
        return None


def stamp(path: str) -> list[Any]:
    """``[path, device, inode, size, mtime_ns, ctime_ns]``, or ``[path, None]``."""
    identity = stat_identity(path)
    return [path, None] if identity is None else [path, *identity]


def code_identity() -> list[list[Any]]:
    """Every ``.py`` module of kvenv's package, recursively, by path and :func:`of_stat`;
    the archive's :func:`stamp` when kvenv runs from a single-file bundle."""
    archive = archive_stamp()
    if archive is not None:
        return [archive]
    directories = [_PACKAGE]
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
                found.append([entry.path, *of_stat(st)])
            elif entry.name != "__pycache__" and entry.is_dir():
                directories.append(entry.path)
    return sorted(found)


def code_digest() -> str:
    """The sha256 of :func:`code_identity`, computed once per process."""
    global _CODE
    if _CODE is None:
        _CODE = sha256_hex(json.dumps(code_identity()).encode("utf-8", "surrogateescape"))
    return _CODE


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
