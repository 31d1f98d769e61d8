"""``kvenv-lib``: kvenv's own package, exposed to the programs that run in a generation.

A script under ``kvenv run`` (or in an activated shell) runs on the host interpreter, which
need not have kvenv installed: kvenv usually lives in a venv of its own, and putting that venv's
site-packages on ``PYTHONPATH`` would shadow the host's packages (filelock, fsspec,
typing_extensions, ...). So each generation holds a directory ``kvenv-lib`` with kvenv's
package (and its built-in profiles, locks and schemas under ``kvenv/_data``) and the packages
``import kvenv.runtime`` needs (:data:`RUNTIME_REQUIREMENTS`) that neither the host nor the
generation provides; activation puts it last on ``PYTHONPATH``, after the overlay and the native
dir. Nothing in it can shadow a host package: a requirement the host or the generation has is
never copied, and kvenv itself is not when the host has kvenv installed (the host's wins).

**A generation never depends on kvenv's own installation.** The files are a copy, made once
into the store as a sealed entry like any unpacked wheel (:mod:`kvenv.env.seal`) and hard-linked
into each generation (copied where links fail): reinstalling kvenv (``pip install -e .`` over
a regular install), upgrading or removing it leaves every generation working. The entry
(``<store>/<key>/``) holds ``lib/`` with the files and ``lib/.kvenv-lib.json``, the listing:
every file's path and sha256, written canonically; ``key`` is the sha256 of the listing's bytes,
so the listing proves itself. The store marker (``.kvenv-store.json``, ``kind = "kvenv-lib"``)
lets ``cache verify``/``prune`` treat it like other entries. The manifest records the key
(``kvenv_lib``), and ``verify`` holds the generation's ``kvenv-lib`` to the listing
(:func:`lib_drift`: a file missing, modified or added) and the entry to its seal.

Generations built before this (no ``kvenv_lib`` in the manifest) hold symlinks into kvenv's
installation; they are still read as such (:mod:`kvenv.env.strays`).
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from kvenv.env.rootfiles import KVENV_LIB

KVENV_DISTRIBUTION = "kvenv-overlay"
# What ``import kvenv.runtime`` and building an ``LLM`` (loading its profile) import from
# outside the standard library: distribution -> import names (tests/unit/env/test_kvenvlib.py
# checks this against the imports that actually happen).
RUNTIME_REQUIREMENTS: Mapping[str, tuple[str, ...]] = {
    "attrs": ("attr", "attrs"),
    "cattrs": ("cattrs",),
    "packaging": ("packaging",),
    "typing-extensions": ("typing_extensions",),
}

# Every name a link in an older generation's ``kvenv-lib`` may have (kvenv.env.strays).
LINKABLE = frozenset(
    ("kvenv", *(name for names in RUNTIME_REQUIREMENTS.values() for name in names))
)
LISTING = ".kvenv-lib.json"
LIB_KIND = "kvenv-lib"
LIB_FORMAT = 1
_DATA = ("profiles", "locks", "schemas")  # kvenv's built-in data, under kvenv/_data


def _location(import_name: str) -> Path | None:
    """Where this process imports ``import_name`` from: a package directory or a module file."""
    spec = importlib.util.find_spec(import_name)
    if spec is None or spec.origin is None or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def sources_for(provided: Iterable[str]) -> tuple[dict[str, Path], list[str]]:
    """What ``kvenv-lib`` gets (top-level entry name -> the directory or module copied) when the
    host and the generation provide the distributions ``provided``, and notes about what could
    not be copied (what lies in an archive, as when kvenv runs as a single file, is said in one
    note)."""
    from packaging.utils import canonicalize_name  # not on the recall's path (link_lib)

    have = {canonicalize_name(n) for n in provided}
    sources: dict[str, Path] = {}
    notes: list[str] = []
    archived: list[str] = []
    wanted: dict[str, tuple[str, ...]] = {}
    if KVENV_DISTRIBUTION not in have:
        wanted[KVENV_DISTRIBUTION] = ("kvenv",)
    wanted.update({d: names for d, names in RUNTIME_REQUIREMENTS.items() if d not in have})
    for dist, names in wanted.items():
        for name in names:
            target = _location(name)
            if target is None:
                notes.append(f"{KVENV_LIB}: {name} ({dist}) is not importable by kvenv itself")
                continue
            if not (target.is_dir() or (target.suffix == ".py" and target.is_file())):  # a zip
                archived.append(name)
                continue
            sources[target.name] = target.resolve()
    if archived:
        notes.append(
            f"{KVENV_LIB}: {', '.join(archived)} not copied: kvenv runs from an archive (a "
            "single file); a program in the generation imports them only from the host"
        )
    return sources, notes


def _files(sources: Mapping[str, Path]) -> dict[str, Path]:
    """Every file to copy: listing path (``kvenv/env/apply.py``) -> source file. Byte code,
    ``__pycache__`` and symlinks are left out; kvenv's built-in data joins its package when it
    lies outside it (a source checkout)."""
    out: dict[str, Path] = {}

    def add_tree(prefix: str, top: Path) -> None:
        for current, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                path = Path(current, name)
                if name.endswith((".pyc", ".pyo")) or path.is_symlink() or not path.is_file():
                    continue
                out[f"{prefix}/{path.relative_to(top).as_posix()}"] = path

    for name, source in sorted(sources.items()):
        if source.is_dir():
            add_tree(name, source)
        else:
            out[name] = source
    if "kvenv" in sources:
        from kvenv._util.resources import data_dir

        package = sources["kvenv"]
        for kind in _DATA:
            directory = data_dir(kind).resolve()
            if directory.is_dir() and not directory.is_relative_to(package):
                add_tree(f"kvenv/_data/{kind}", directory)
    return out


def _sha256(path: Path) -> str:
    with open(path, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()  # small files: read whole


def listing_bytes(files: Mapping[str, str]) -> bytes:
    """The canonical listing of ``files`` (path -> sha256 hex): its sha256 is the entry key."""
    document = {"format": LIB_FORMAT, "kind": LIB_KIND, "files": dict(sorted(files.items()))}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def read_listing(path: Path, key: str | None = None) -> dict[str, str] | None:
    """The files (path -> sha256) of the listing at ``path``; None when it is unreadable, not a
    listing, or (with ``key``) its bytes do not hash to ``key``."""
    try:
        data = path.read_bytes()
        if key is not None and hashlib.sha256(data).hexdigest() != key:
            return None
        document = json.loads(data)
        files = document["files"]
        if document.get("kind") != LIB_KIND or document.get("format") != LIB_FORMAT:
            return None
        if not isinstance(files, dict):
            return None
        return {str(k): str(v) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _entry_complete(entry: Path, key: str) -> bool:
    from kvenv.env.seal import seal_problem

    return read_listing(entry / "lib" / LISTING, key) is not None and seal_problem(entry) is None


def store_lib(store: Path, sources: Mapping[str, Path]) -> str:
    """The key of the sealed store entry holding a copy of ``sources`` (made when missing or
    broken: a copy in a temporary directory beside it, hashed as written, sealed, renamed into
    place). Returns the key of what was copied, which is what the sources held then."""
    from kvenv.env.seal import publish_sealed, remove_sealed, seal
    from kvenv.env.store import MARKER

    files = _files(sources)
    wanted = hashlib.sha256(listing_bytes({r: _sha256(p) for r, p in files.items()})).hexdigest()
    if _entry_complete(store / wanted, wanted):
        _noted(store, wanted)
        return wanted
    store.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=".tmp-kvenv-lib-", dir=store))
    try:
        copied: dict[str, str] = {}
        (temp / "lib").mkdir()
        for rel, source in files.items():
            target = temp / "lib" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(source, "rb") as reader, open(target, "xb") as writer:
                data = reader.read()
                writer.write(data)
            copied[rel] = hashlib.sha256(data).hexdigest()
            os.chmod(target, 0o755 if os.access(source, os.X_OK) else 0o644)
        listing = listing_bytes(copied)
        (temp / "lib" / LISTING).write_bytes(listing)
        key = hashlib.sha256(listing).hexdigest()
        marker = {"format": LIB_FORMAT, "kind": LIB_KIND, "key": key}
        (temp / MARKER).write_text(json.dumps(marker, separators=(",", ":")), encoding="utf-8")
        seal(temp)
        final = store / key
        if final.exists() and not _entry_complete(final, key):
            remove_sealed(final)  # a broken or partial entry: made again
        publish_sealed(temp, final)
        _noted(store, key)
        return key
    except BaseException:
        remove_sealed(temp)
        raise


def _noted(store: Path, key: str) -> None:
    """The entry as a memo dependency, as the store notes a wheel's entry: its marker's bytes
    (:func:`kvenv.env.store.lookup`)."""
    from kvenv._util import memo
    from kvenv.env.store import MARKER

    memo.note("bytes", os.fspath(store / key / MARKER))


def link_lib(store: Path, key: str, generation: Path) -> None:
    """``generation/kvenv-lib``: every file of the entry ``key`` (its listing included), hard
    linked (copied where a link fails, e.g. across filesystems)."""
    source = store / key / "lib"
    files = read_listing(source / LISTING, key)
    if files is None:
        raise OSError(errno.ENOENT, "kvenv-lib store entry is incomplete", str(source))
    lib = generation / KVENV_LIB
    lib.mkdir(exist_ok=True)
    for rel in [*sorted(files), LISTING]:
        target = lib / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source / rel, target)
        except OSError:
            shutil.copyfile(source / rel, target)
            os.chmod(target, os.stat(source / rel).st_mode & 0o555)


def expose_kvenv(generation: Path, provided: Iterable[str], store: Path) -> tuple[str, list[str]]:
    """Create ``generation/kvenv-lib`` from the sealed store entry of kvenv's package and the
    missing requirements (see the module docstring): the entry's key and the notes."""
    sources, notes = sources_for(provided)
    key = store_lib(store, sources)
    link_lib(store, key, generation)
    return key, notes


def lib_dir(generation: Path) -> Path | None:
    """The generation's ``kvenv-lib``, if it has one (generations built before it had none)."""
    lib = generation / KVENV_LIB
    return lib if lib.is_dir() else None


def lib_drift(generation: Path, key: str) -> list[tuple[str, str, str]]:
    """How ``generation/kvenv-lib`` differs from the listing of ``key``: ``(kind, path,
    message)`` with kind ``modified`` (the listing itself, or a file whose sha256 differs) or
    ``missing``. Added files are :mod:`kvenv.env.strays`' to report."""
    lib = generation / KVENV_LIB
    listing = lib / LISTING
    files = read_listing(listing, key)
    if files is None:
        return [
            ("modified", str(listing), "kvenv-lib's listing is missing or not the recorded one")
        ]
    out: list[tuple[str, str, str]] = []
    for rel, digest in sorted(files.items()):
        path = lib / rel
        try:
            actual = _sha256(path)
        except OSError:
            out.append(("missing", str(path), "file of kvenv-lib is missing"))
            continue
        if actual != digest:
            out.append(("modified", str(path), "file of kvenv-lib does not match its listing"))
    return out


def listed_lib_files(generation: Path, key: str) -> set[str] | None:
    """The normalised paths the listing of ``key`` allows in ``generation/kvenv-lib`` (the
    listing included); None when the listing is not the recorded one."""
    lib = generation / KVENV_LIB
    files = read_listing(lib / LISTING, key)
    if files is None:
        return None
    return {os.path.normpath(lib / rel) for rel in [*files, LISTING]}
