"""Where a runtime root and a cache may be: checked, not trusted, before anything is written.

A root (or cache) is refused when it lies inside another kvenv root (a live generation is on
that root's ``PYTHONPATH``, and its next prune would delete it), inside a kvenv cache or store,
inside the host's installation (``sys.prefix``, a ``site-packages``), when root and cache overlap,
or when it *contains* any of those. Paths are compared canonical (symlinks resolved: a root
reached through a link is checked where it really is). Also here: a root or cache that names a
file, with a fix that names where the path came from (``$KVENV_ROOT`` is fixed by changing the
variable, not by ``--root``).

Standard library only (the recall of a warm apply checks a new root here before it builds
anything); :mod:`kvenv.errors` is imported only to raise.
"""

from __future__ import annotations

import os
import sys

from kvenv.model.places import ENV_CACHE, ENV_ROOT, ROOT_MARKER

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Iterable, Sequence
    from pathlib import Path

    from kvenv.model.locations import Locations

# What makes a directory a kvenv cache, a store entry, or a store (their own names).
_CACHE_CHILDREN = ("artifacts-v1",)
_STORE_DIR = "store"
_STORE_ENTRY_MARKER = ".kvenv-store.json"  # kvenv.env.store.MARKER (a test holds them equal)


# Directories that are never a runtime root (nor reset): the filesystem root, the system's own
# and Kaggle's top directories (the reference system's list); the user's home is added live.
SYSTEM_DIRS = (
    "/",
    "/root",
    "/home",
    "/usr",
    "/usr/local",
    "/opt",
    "/etc",
    "/var",
    "/tmp",
    "/kaggle",
    "/kaggle/input",
    "/kaggle/working",
)


def system_dir(path: str) -> str | None:
    """What ``path`` (canonical) is when it may never be a runtime root (the filesystem root,
    the home directory, a system directory), or None."""
    if os.path.dirname(path) == path:
        return "the filesystem root"
    home = os.environ.get("HOME")
    if home and path == os.path.realpath(home):
        return "the home directory"
    return "a system directory" if path in SYSTEM_DIRS else None


def _inside(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or below it (both canonical)."""
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def _is_store(directory: str) -> bool:
    """Whether ``directory`` is a kvenv store: one of its entries carries the store marker."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if os.path.isfile(os.path.join(entry.path, _STORE_ENTRY_MARKER)):
                    return True
    except OSError:
        return False
    return False


def kvenv_place_of(directory: str) -> str | None:
    """What kvenv place ``directory`` itself is (``"runtime root"``, ``"cache"``, ``"store"``,
    ``"store entry"``), or None."""
    if os.path.isfile(os.path.join(directory, ROOT_MARKER)):
        return "runtime root"
    if os.path.isfile(os.path.join(directory, _STORE_ENTRY_MARKER)):
        return "store entry"
    if any(os.path.isdir(os.path.join(directory, name)) for name in _CACHE_CHILDREN):
        return "cache"
    store = os.path.join(directory, _STORE_DIR)
    if os.path.isdir(store) and _is_store(store):
        return "cache"
    if os.path.basename(directory) == _STORE_DIR and _is_store(directory):
        return "store"
    return None


def _enclosing(path: str) -> tuple[str, str] | None:
    """The nearest directory strictly above ``path`` that is a kvenv place, and what it is."""
    current = path
    while True:
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
        what = kvenv_place_of(current)
        if what is not None:
            return current, what


def _venv_or_prefix(executable: str) -> str | None:
    """The installation an interpreter belongs to: the directory above its ``bin`` when that
    is a virtual environment (``pyvenv.cfg``) or a Python prefix (``lib/python3*``)."""
    prefix = os.path.dirname(os.path.realpath(os.path.dirname(os.path.abspath(executable))))
    if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
        return prefix
    try:
        names = os.listdir(os.path.join(prefix, "lib"))
    except OSError:
        return None
    return prefix if any(n.startswith("python3") for n in names) else None


def host_places(executable: str | None, sys_path: Iterable[str] = ()) -> list[str]:
    """The host's own directories, canonical: kvenv's ``sys.prefix``, the installation of the
    host interpreter ``executable``, and the ``site-packages``/``dist-packages`` directories of
    ``sys_path`` (the filesystem root is never one: it would hold everything)."""
    found = [sys.prefix]
    if executable:
        prefix = _venv_or_prefix(executable)
        if prefix is not None:
            found.append(prefix)
    found += [p for p in sys_path if os.path.basename(p) in ("site-packages", "dist-packages")]
    out: list[str] = []
    for path in found:
        real = os.path.realpath(path)
        if os.path.dirname(real) != real and real not in out:
            out.append(real)
    return out


def misplaced(root: str, cache: str, host: Sequence[str]) -> tuple[str, str, str] | None:
    """``(which, problem, what it collides with)`` when the runtime root or the cache (both
    canonical) may not be used where they are (see the module docstring); None when both may.
    ``which`` is ``"root"`` or ``"cache"``."""
    what = system_dir(root)
    if what is not None:
        return "root", f"is {what}: a runtime root must be a directory of its own", root
    if root == cache:
        return "root", f"is the same directory as the cache {cache}", cache
    if _inside(root, cache):
        return "root", f"is inside the cache {cache}", cache
    if _inside(cache, root):
        return "cache", f"is inside the runtime root {root}", root
    for which, path in (("root", root), ("cache", cache)):
        found = _enclosing(path)
        if found is not None:
            base, what = found
            return which, f"is inside the kvenv {what} {base}", base
        for place in host:
            if _inside(path, place):
                return which, f"is inside the host's Python installation {place}", place
            if _inside(place, path):
                return which, f"contains the host's Python installation {place}", place
    return None


def how_to_change(which: str, origin: str) -> str:
    """How to choose another root or cache, for where the current one came from."""
    flag, variable = ("--root", ENV_ROOT) if which == "root" else ("--cache", ENV_CACHE)
    if origin == f"${variable}":
        return f"point ${variable} at another directory, or unset it (`unset {variable}`)"
    if origin.startswith("the profile's"):
        return f"change {origin} in the profile, or give {flag} DIR"
    return f"give another {flag} DIR" if origin == flag else f"give {flag} DIR"


def check_places(locations: Locations, host: Sequence[str]) -> None:
    """Refuse (:class:`kvenv.errors.ConflictError`) a root or cache :func:`misplaced` finds;
    the message names the path, where it came from and the fix."""
    found = misplaced(str(locations.root), str(locations.cache), host)
    if found is None:
        return
    which, problem, _ = found
    path, origin = (
        (locations.root, locations.root_from)
        if which == "root"
        else (locations.cache, locations.cache_from)
    )
    what = "runtime root" if which == "root" else "cache"
    from kvenv.errors import ConflictError

    if system_dir(str(locations.root)) is not None:
        hint = f"{how_to_change('root', locations.root_from)} (e.g. a new directory of its own)"
    elif which == "cache" and found[2] == str(locations.root):  # the root holds the cache
        hint = (
            f"{how_to_change('cache', origin)} outside {locations.root}, or a runtime root "
            f"that does not hold the cache ({how_to_change('root', locations.root_from)})"
        )
    else:
        hint = (
            f"{how_to_change(which, origin)}: a {what} must lie outside every other kvenv "
            "root, cache and store, and outside the host's Python installation"
        )
    raise ConflictError(
        f"refusing the {what} {path} (from {origin}): it {problem}; nothing was written",
        hint=hint,
    )


def refuse_file_places(locations: Locations) -> None:
    """Refuse (:class:`kvenv.errors.InputError`) a root or cache that exists and is not a
    directory, naming where the path came from and how to change it there."""
    for which, path, origin in (
        ("root", locations.root, locations.root_from),
        ("cache", locations.cache, locations.cache_from),
    ):
        if os.path.exists(path) and not os.path.isdir(path):
            from kvenv.errors import InputError

            what = "runtime root" if which == "root" else "cache"
            raise InputError(
                f"the {what} {path} (from {origin}) is a file, not a directory",
                hint=f"{how_to_change(which, origin)}; kvenv never replaces a file",
            )


def holds_a_root(path: Path) -> bool:
    """Whether another runtime root lies anywhere below ``path`` (what a prune must not
    remove: kvenv did not create it as part of what it prunes). Symlinks are not followed."""
    for current, dirs, files in os.walk(path):
        if ROOT_MARKER in files:
            return True
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
    return False
