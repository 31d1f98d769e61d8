"""Files in a generation that its manifest does not list: found by ``kvenv verify`` and removed
by ``kvenv apply --repair``.

A generation holds exactly ``manifest.json`` and the ``native/``, ``overlay/``, ``bin/`` (and,
when a wheel has them, ``data/`` and ``include/``) directories, and in those exactly the files the
RECORDs of the manifest's distributions list (console scripts as ``../bin/NAME``, a wheel's data
as ``../data/...``). Anything else
(a ``sitecustomize.py``, a ``.pth``, a module, a script, a symlink) was added after kvenv made
the generation, and is on the ``PYTHONPATH`` or ``PATH`` of every activated process.

One kind of file is expected without being listed: the byte code Python itself writes beside a
listed module, ``<dir>/__pycache__/<stem>.<tag>[.opt-N].pyc`` for a listed ``<dir>/<stem>.py``.
(Such a file is not compared with its source: Python does that itself, by the source's
modification time and size.)

``kvenv-lib`` (:mod:`kvenv.env.kvenvlib`) is known too, and held to what it may hold: the files
its listing (recorded in the manifest by its sha256) names, and Python's byte code of those
modules; in a generation made before ``kvenv-lib`` was a store entry, only symlinks, each named
after one of the import names kvenv linked there and pointing at a directory or module of that
name. Anything else in it (a ``sitecustomize.py``, a ``.pth``, a link under another name) is on the
``PYTHONPATH`` of every activated process, and is reported like any added file.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

from kvenv.env.kvenvlib import LINKABLE
from kvenv.env.manifest import MANIFEST_NAME, Manifest
from kvenv.env.rootfiles import KVENV_LIB

_PYC = re.compile(r"^(?P<stem>[^.]+)\.[A-Za-z0-9_-]+(?:\.opt-[12])?\.pyc$")
# The generation's own directories (kvenv.env.store.GenerationLayout: the two layers' sites and
# the directories they share for scripts, a wheel's ``.data/data`` and its headers).
_LAYERS = ("native", "overlay", "bin", "data", "include")


def generation_path(manifest: Manifest) -> Path:
    """The generation directory ``manifest`` describes (the parent of its layer dirs)."""
    return Path(manifest.dirs.native).parent


def listed_files(manifest: Manifest) -> set[str]:
    """Every file the manifest's distributions' RECORDs list, as normalised absolute paths,
    and the manifest itself. A RECORD that cannot be read lists nothing (verify reports it)."""
    listed = {os.path.normpath(generation_path(manifest) / MANIFEST_NAME)}
    for dist in manifest.distributions:
        site = manifest.dirs.native if dist.layer == "native" else manifest.dirs.overlay
        record = os.path.join(site, dist.dist_info, "RECORD")
        try:
            with open(record, encoding="utf-8", newline="") as stream:
                rows = list(csv.reader(stream))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        listed.add(os.path.normpath(record))
        for row in rows:
            if row and row[0]:
                listed.add(os.path.normpath(os.path.join(site, row[0])))
    return listed


def _byte_code(path: str, listed: set[str]) -> bool:
    """Whether ``path`` is byte code Python wrote for a listed module of the same package."""
    directory, name = os.path.split(path)
    if os.path.basename(directory) != "__pycache__":
        return False
    found = _PYC.match(name)
    if found is None:
        return False
    return os.path.join(os.path.dirname(directory), found.group("stem") + ".py") in listed


def _kvenv_lib_strays(lib: str) -> list[str]:
    """The entries of ``kvenv-lib`` that are not a link kvenv makes there (see the module
    docstring); a ``kvenv-lib`` that is not a plain directory is itself the stray."""
    if os.path.islink(lib) or not os.path.isdir(lib):
        return [lib]
    found = []
    for name in sorted(os.listdir(lib)):
        path = os.path.join(lib, name)
        target = os.readlink(path) if os.path.islink(path) else None
        module = name[:-3] if name.endswith(".py") else name  # a package, or a one-file module
        if target is None or module not in LINKABLE or os.path.basename(target) != name:
            found.append(path)
    return found


def _lib_strays(generation: str, key: str) -> list[str]:
    """The files of ``kvenv-lib`` (a store entry's copy: :mod:`kvenv.env.kvenvlib`) that its
    listing does not hold, Python's own byte code of a listed module aside; every one when the
    listing is not the recorded one. Symlinks are never followed."""
    from kvenv.env.kvenvlib import listed_lib_files

    lib = os.path.join(generation, KVENV_LIB)
    if os.path.islink(lib) or not os.path.isdir(lib):
        return [lib]
    listed = listed_lib_files(Path(generation), key) or set()
    found: list[str] = []
    for current, dirs, files in os.walk(lib):
        for name in list(dirs):
            if os.path.islink(os.path.join(current, name)):
                dirs.remove(name)
                files.append(name)
        for name in files:
            path = os.path.normpath(os.path.join(current, name))
            if path not in listed and not _byte_code(path, listed):
                found.append(path)
    return found


def stray_files(manifest: Manifest) -> list[str]:
    """The files, symlinks and other entries in the generation that its manifest does not
    list, sorted (directories are not reported: the files they hold are). Symlinks are never
    followed."""
    generation = str(generation_path(manifest))
    if not os.path.isdir(generation):
        return []  # a missing generation is reported by verify's own checks
    listed = listed_files(manifest)
    found: list[str] = []
    for name in sorted(os.listdir(generation)):
        path = os.path.join(generation, name)
        if name in _LAYERS and os.path.isdir(path) and not os.path.islink(path):
            continue
        if name == KVENV_LIB:
            if manifest.kvenv_lib is not None:
                found.extend(_lib_strays(generation, manifest.kvenv_lib))
            else:  # an older generation's links into kvenv's installation
                found.extend(_kvenv_lib_strays(path))
            continue
        if os.path.normpath(path) not in listed:
            found.append(path)
    for layer in _LAYERS:
        top = os.path.join(generation, layer)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        for current, dirs, files in os.walk(top):
            for name in list(dirs):
                path = os.path.join(current, name)
                if os.path.islink(path):  # a link to a directory: an entry of its own
                    dirs.remove(name)
                    files.append(name)
            for name in files:
                path = os.path.normpath(os.path.join(current, name))
                if path not in listed and not _byte_code(path, listed):
                    found.append(path)
    return sorted(found)


def remove_strays(manifest: Manifest) -> list[str]:
    """Remove :func:`stray_files` from the generation (and the directories that held only
    them); the paths removed. What lies in another runtime root nested in the generation (an
    older kvenv allowed one there) is someone's environment: it is reported, never removed."""
    import shutil

    from kvenv.model.places import ROOT_MARKER

    removed: list[str] = []
    keep_dirs = {os.path.dirname(p) for p in listed_files(manifest)}
    strays = stray_files(manifest)
    roots = [os.path.dirname(p) + os.sep for p in strays if os.path.basename(p) == ROOT_MARKER]
    for path in strays:
        if any(path.startswith(root) for root in roots):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(path)
        _prune_empty(os.path.dirname(path), keep_dirs, str(generation_path(manifest)))
    return removed


def _prune_empty(directory: str, keep: set[str], generation: str) -> None:
    """Remove ``directory`` and its parents while they are empty, were made for added files
    only (no listed file was ever in them) and lie inside the generation."""
    while directory != generation and directory.startswith(generation + os.sep):
        if any(k == directory or k.startswith(directory + os.sep) for k in keep):
            return
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = os.path.dirname(directory)
