"""Which files a full path read, seen by a CPython audit hook, and whether a memo record's
dependencies cover each of them (issue 27's completeness test).

:func:`reads_of` runs a callable with the hook on and returns what it opened for reading and
listed (the ``open``, ``os.listdir`` and ``os.scandir`` events; ``os.stat`` raises no audit
event in CPython, so a stat-only read is not seen). :func:`uncovered` returns the paths no
dependency of a record covers:

- ``bytes``/``stat``/``isdir`` on the path itself (or, for ``stat``, on a directory that is
  listed: its mtime moves with its entries);
- ``listing`` on a directory that was listed; ``tree`` on any directory above the path;
- ``code``: kvenv's own package, and the interpreter's imports (a file of a loaded module, or
  a ``.py``/``.pyc``/``.so``/``.pth`` file on ``sys.path``);
- ``host``: every path the probe's identity records, and anything under a directory of the
  host's import path (installing a distribution changes that directory's identity);
- the memo's own records (what it reads to answer) are its business, not an input;
- what the run itself wrote or made before reading it (a new root's files) is its output, not an
  input: :func:`reads_of` does not report it;
- ``bytes`` on a store entry's marker covers the entry: an entry is complete and immutable once
  its marker is renamed into place with it, and sealed (:mod:`kvenv.env.store`,
  :mod:`kvenv.env.seal`).

A CPython audit hook cannot be removed: one hook is installed once per process and records
only while :func:`reads_of` runs.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import kvenv

T = TypeVar("T")

_PACKAGE = str(Path(kvenv.__file__).resolve().parent)
_ACTIVE: list[tuple[set[tuple[str, str]], set[str]]] = []  # (what was read, what was written)
_INSTALLED = False
_LOCK = threading.Lock()
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _ACTIVE:
        return
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # a file descriptor
        name = os.path.abspath(os.fsdecode(path))
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
        if writing or (mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS):
            for _, written in _ACTIVE:
                written.add(name)
            return
        seen = ("open", name)
    elif event in ("os.mkdir", "os.rename", "os.link", "os.symlink"):
        target = args[1] if event != "os.mkdir" else args[0]
        if isinstance(target, (str, bytes, os.PathLike)):
            for _, written in _ACTIVE:
                written.add(os.path.abspath(os.fsdecode(target)))
        return
    elif event in ("os.listdir", "os.scandir"):
        path = args[0]
        if path is None or isinstance(path, int):
            return
        seen = ("list", os.path.abspath(os.fsdecode(path)))
    else:
        return
    for found, written in _ACTIVE:
        if not any(_under(seen[1], w) for w in written):
            found.add(seen)


def reads_of(call: Callable[[], T]) -> tuple[T, set[tuple[str, str]]]:
    """``call()``'s result and what it read: ``("open", path)`` and ``("list", dir)``; not
    what it wrote or made before (under a directory it made: its output)."""
    global _INSTALLED
    with _LOCK:
        if not _INSTALLED:
            sys.addaudithook(_hook)
            _INSTALLED = True
    found: set[tuple[str, str]] = set()
    entry = (found, set[str]())
    _ACTIVE.append(entry)
    try:
        result = call()
    finally:
        _ACTIVE.remove(entry)
    return result, found


def _under(path: str, top: str) -> bool:
    top = os.path.abspath(top)
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _module_files() -> set[str]:
    files: set[str] = set()
    for module in list(sys.modules.values()):
        for attr in ("__file__", "__cached__"):
            value = getattr(module, attr, None)
            if isinstance(value, str):
                files.add(os.path.abspath(value))
    return files


def _is_import(path: str, modules: set[str]) -> bool:
    if path in modules or _under(path, _PACKAGE):
        return True
    if path.endswith((".py", ".pyc", ".so", ".pth")) or "__pycache__" in path:
        return any(entry and _under(path, entry) for entry in sys.path)
    return os.path.basename(path) == "pyvenv.cfg" or _under(path, sys.base_prefix)


def _paths_in(value: Any) -> Iterable[str]:
    if isinstance(value, str) and value.startswith("/"):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _paths_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _paths_in(item)


def uncovered(
    reads: set[tuple[str, str]], deps: list[list[Any]], *, memo_root: Path | None = None
) -> list[tuple[str, str]]:
    """The reads no dependency of ``deps`` covers (see the module)."""
    exact: set[str] = set()
    listed: set[str] = set()
    trees: list[str] = []
    host_paths: set[str] = set()
    host_dirs: list[str] = []
    entries: list[str] = []
    has_code = False
    for kind, argument, value in deps:
        if kind in ("bytes", "stat", "isdir"):
            exact.add(os.path.abspath(argument))
            if kind == "bytes" and os.path.basename(argument) == ".kvenv-store.json":
                entries.append(os.path.dirname(os.path.abspath(argument)))
            if kind == "stat":
                listed.add(os.path.abspath(argument))
        elif kind == "listing":
            listed.add(os.path.abspath(argument))
        elif kind == "tree":
            trees.append(os.path.abspath(argument[0]))
        elif kind == "code":
            has_code = True
        elif kind == "host":
            host_paths.update(os.path.abspath(p) for p in _paths_in(value))
            host_dirs.extend(os.path.abspath(p) for p in value.get("sys_path", []) if p)
    modules = _module_files()
    missing = []
    for what, path in sorted(reads):
        if memo_root is not None and _under(path, str(memo_root / "memo-v1")):
            continue
        if has_code and _is_import(path, modules):
            continue
        if any(_under(path, t) for t in [*trees, *entries]):
            continue
        if what == "open" and path in exact:
            continue
        if what == "list" and path in listed:
            continue
        if path in host_paths or any(_under(path, d) for d in host_dirs):
            continue
        missing.append((what, path))
    return missing
