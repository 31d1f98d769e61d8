"""``kvenv reset``: remove what kvenv made in a runtime root, and only that.

A reset is planned first (pure checks on paths, then a listing), then executed. Refused
outright: an empty path, a path reached through a symlink (as given, before kvenv makes it
canonical: :func:`symlinked_part`), the reference system's dangerous paths (``/``, ``$HOME``,
``/root``, ``/home``, ``/usr``, ``/usr/local``, ``/opt``, ``/etc``, ``/var``, ``/tmp``,
``/kaggle``, ``/kaggle/input``, ``/kaggle/working``), the current directory or one of its
parents, a git working tree, and a root without kvenv's ownership marker.

Inside an owned root kvenv removes what it made and can name: each generation directory (its
files, and what was added to them, as ``apply --repair`` removes it), the pointer, the
activation shims, the lock's owner file. Anything else is kept and named (action ``keep``):
another runtime root nested anywhere in a generation (a directory holding its own
``.kvenv-root``, with everything below it), a user's file or directory beside kvenv's names in
the root or in ``generations/``, a symlink where kvenv writes a file. The root
goes, with its marker and lock, only when nothing is kept; otherwise it stays, still marked as
kvenv's, holding what was kept. The cache is kept unless ``purge_cache`` (then only its
``store`` and ``artifacts-v1``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import attrs

from kvenv.env.placecheck import SYSTEM_DIRS
from kvenv.env.root import OWN_NAMES, POINTER_NAME, RootLock, _is_generation_id, is_owned
from kvenv.env.rootfiles import GENERATIONS
from kvenv.env.seal import remove_sealed
from kvenv.errors import ConflictError, InputError
from kvenv.model.locations import LOCK_NAME, ROOT_MARKER, Locations

DANGEROUS = SYSTEM_DIRS  # the reference system's list, shared with placecheck
# kvenv's own names at the top of a root, besides ``generations`` (removed entry by entry).
ROOT_NAMES = (
    POINTER_NAME,
    "activate.sh",
    "activate.fish",
    "activate.ps1",
    LOCK_NAME + ".owner",
)
CACHE_NAMES = ("store", "artifacts-v1")
Action = Literal["remove", "absent", "preserve", "keep"]
NESTED_ROOT = f"another runtime root (it has its own {ROOT_MARKER}): not kvenv's to remove"
NOT_MADE = "not made by kvenv: kept"


@attrs.frozen
class ResetTarget:
    label: str
    path: str
    action: Action
    reason: str


@attrs.frozen
class ResetPlan:
    root: str
    cache: str
    targets: list[ResetTarget]

    @property
    def kept(self) -> list[ResetTarget]:
        """What the reset keeps inside the root (a nested root, a user's file), in order."""
        return [t for t in self.targets if t.action == "keep"]

    @property
    def cache_kept(self) -> bool:
        """Whether the reset keeps a cache that holds something (its store or downloads)."""
        return any(t.action == "preserve" for t in self.targets)


def symlinked_part(path: str | Path) -> Path | None:
    """The first part of ``path`` (made absolute, ``~`` expanded, not resolved) that is a
    symlink, or None: what a reset refuses, since the canonical path kvenv acts on is then not
    the path the user wrote."""
    absolute = Path(os.path.abspath(Path(path).expanduser()))
    for part in [*reversed(absolute.parents), absolute]:
        if os.path.islink(part):
            return part
    return None


def path_problem(path: Path, *, cwd: Path, environ: Mapping[str, str]) -> str | None:
    """Why ``path`` may not be reset, or None."""
    text = str(path)
    if not text or text == ".":
        return "empty path"
    absolute = Path(os.path.abspath(path))
    if os.path.realpath(absolute) != str(absolute):
        return f"refusing path reached through a symlink: {absolute}"
    dangerous = set(DANGEROUS)
    home = environ.get("HOME")
    if home:
        dangerous.add(os.path.abspath(home))
    if str(absolute) in dangerous:
        return f"refusing dangerous path: {absolute}"
    here = Path(os.path.abspath(cwd))
    if absolute == here or absolute in here.parents:
        return f"refusing the current directory or one of its parents: {absolute}"
    if (absolute / ".git").exists():
        return f"refusing a git working tree: {absolute}"
    return None


def plan_reset(
    locations: Locations,
    *,
    purge_cache: bool = False,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    given_root: str | Path | None = None,
) -> ResetPlan:
    """Check the paths and list what a reset would remove and keep. Raises when it would be
    unsafe. ``given_root`` is the root as the user wrote it (a flag, a variable, the profile's
    ``[paths] root``), before it was made canonical: refused when it runs through a symlink."""
    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    root = locations.root
    linked = symlinked_part(given_root) if given_root is not None else None
    if linked is not None:
        raise InputError(
            f"cannot reset runtime root: refusing a path reached through a symlink: "
            f"{given_root} ({linked} -> {os.readlink(linked)})",
            hint=f"name the real directory instead: {root} (or remove the symlink)",
        )
    problem = path_problem(root, cwd=here, environ=env)
    if problem:
        raise InputError(f"cannot reset runtime root: {problem}")
    targets: list[ResetTarget] = []
    if root.exists():
        if not (root / ROOT_MARKER).is_file():
            raise ConflictError(
                f"cannot prove ownership of {root}: it has no {ROOT_MARKER} marker",
                hint="kvenv only removes runtime roots it created; remove it yourself if sure",
            )
        targets += _root_targets(root)
    else:
        targets.append(
            ResetTarget("root", str(root), "absent", "path is absent; nothing to remove")
        )
    cache = locations.cache
    for name in CACHE_NAMES:
        path = cache / name
        present = path.exists()
        if not purge_cache:
            targets.append(
                ResetTarget(name, str(path), "preserve", "download cache is preserved by default")
                if present
                else ResetTarget(name, str(path), "absent", "no cache here; nothing to keep")
            )
            continue
        problem = path_problem(cache, cwd=here, environ=env)
        if problem:
            raise InputError(f"cannot purge cache: {problem}")
        targets.append(
            ResetTarget(
                name,
                str(path),
                "remove" if present else "absent",
                "--purge-cache" if present else "path is absent; nothing to remove",
            )
        )
    return ResetPlan(str(root), str(cache), targets)


def _root_targets(root: Path) -> list[ResetTarget]:
    """What a reset does with each entry of the owned ``root``."""
    targets: list[ResetTarget] = []
    generations = root / GENERATIONS
    if generations.is_symlink() or (generations.exists() and not generations.is_dir()):
        targets.append(ResetTarget(GENERATIONS, str(generations), "keep", NOT_MADE))
    elif generations.is_dir():
        for entry in sorted(generations.iterdir()):
            if entry.is_symlink() or not entry.is_dir() or not _is_generation_id(entry.name):
                targets.append(ResetTarget(entry.name, str(entry), "keep", _why_kept(entry)))
                continue
            kept = _kept_in_generation(entry)
            why = "kvenv generation" + (", except what is kept below" if kept else "")
            targets.append(ResetTarget(f"generation {entry.name}", str(entry), "remove", why))
            targets += kept
    else:
        targets.append(ResetTarget(GENERATIONS, str(generations), "absent", "no generations"))
    for name in ROOT_NAMES:
        path = root / name
        if path.is_symlink():
            targets.append(ResetTarget(name, str(path), "keep", "a symlink: kvenv made a file"))
        elif path.exists():
            targets.append(ResetTarget(name, str(path), "remove", "kvenv runtime state"))
        else:
            targets.append(ResetTarget(name, str(path), "absent", "nothing to remove"))
    own = {GENERATIONS, *ROOT_NAMES, *OWN_NAMES}
    for entry in sorted(root.iterdir()):
        temp = entry.name.startswith(".") and entry.name.endswith(".tmp")  # atomic writes' own
        if entry.name in own:
            continue
        if temp and not entry.is_symlink() and entry.is_file():
            targets.append(ResetTarget(entry.name, str(entry), "remove", "kvenv temporary file"))
        else:
            targets.append(ResetTarget(entry.name, str(entry), "keep", _why_kept(entry)))
    return targets


def _why_kept(path: Path) -> str:
    if not path.is_symlink() and path.is_dir() and _holds_marker(path):
        return (
            NESTED_ROOT
            if (path / ROOT_MARKER).is_file()
            else (f"holds another runtime root (a {ROOT_MARKER} below it): not kvenv's to remove")
        )
    return NOT_MADE


def _holds_marker(path: Path) -> bool:
    from kvenv.env.placecheck import holds_a_root

    return holds_a_root(path)


def _kept_in_generation(generation: Path) -> list[ResetTarget]:
    """What in ``generation`` kvenv did not make: every runtime root nested in it (named once,
    with all below it). A file added to a generation is removed with it, as ``apply
    --repair`` removes it (:mod:`kvenv.env.strays`): the generation directory is kvenv's, and
    a generation's manifest (removed first) is all that could tell the two apart."""
    kept: list[ResetTarget] = []
    roots: list[str] = []
    for current, dirs, files in os.walk(generation):
        if ROOT_MARKER in files:
            roots.append(current)
            kept.append(ResetTarget("nested root", current, "keep", NESTED_ROOT))
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
    return kept


def execute_reset(
    plan: ResetPlan, locations: Locations, *, on_wait: Callable[[str], None] = lambda _m: None
) -> list[str]:
    """Remove the planned targets, holding the root lock of an owned root (so no apply runs
    meanwhile; ``on_wait`` hears about waiting for one). Returns the removed paths."""
    if is_owned(locations.root):
        with RootLock(locations, wait=True, on_wait=on_wait):
            return _remove(plan)
    return _remove(plan)


def _remove(plan: ResetPlan) -> list[str]:
    """Remove the planned targets; re-check each for symlinks first. Returns removed paths."""
    removed: list[str] = []
    kept = [t.path for t in plan.kept]
    for target in plan.targets:
        if target.action != "remove":
            continue
        path = Path(target.path)
        if path.is_symlink() or os.path.realpath(path) != os.path.abspath(path):
            raise ConflictError(
                f"refusing to remove {path}: it became a symlink",
                hint=f"already removed: {', '.join(removed) or 'nothing'}",
            )
        inside = [k for k in kept if k.startswith(str(path) + os.sep)]
        try:
            if inside:
                _remove_around(path, inside)
            elif path.is_dir():
                remove_sealed(path)  # store entries (and their hard links) are read-only
            elif path.exists():
                path.unlink()
        except OSError as exc:
            raise InputError(
                f"reset failed at {target.label} path {path}: {exc}",
                hint=f"already removed: {', '.join(removed) or 'nothing'}; cache preserved",
            ) from None
        removed.append(str(path))
    root = Path(plan.root)
    if root.is_dir() and not root.is_symlink():
        generations = root / GENERATIONS
        if generations.is_dir() and not generations.is_symlink():
            with contextlib.suppress(OSError):  # only when empty: what is kept stays, and its dir
                generations.rmdir()
        rest = {p.name for p in root.iterdir()}
        # What marks a root as kvenv's goes last, and only with the root itself.
        if rest <= OWN_NAMES:  # nothing kept: the root goes, with its marker and lock
            for name in rest:
                (root / name).unlink()
            root.rmdir()
            removed.append(str(root))
    return removed


def _remove_around(top: Path, kept: list[str]) -> None:
    """Remove everything under ``top`` but the ``kept`` paths (files, or nested roots with all
    below them) and the directories that lead to them. Symlinks are removed, never followed."""
    keep = set(kept)
    leads = {str(p) for k in kept for p in Path(k).parents}
    for current, dirs, files in os.walk(top):
        if current in keep:
            dirs[:] = []
            continue
        os.chmod(current, stat.S_IMODE(os.lstat(current).st_mode) | stat.S_IWUSR | stat.S_IXUSR)
        for name in list(dirs):
            path = os.path.join(current, name)
            if os.path.islink(path):
                dirs.remove(name)
                files.append(name)
            elif path not in keep and path not in leads:
                dirs.remove(name)
                remove_sealed(Path(path))
        for name in files:
            path = os.path.join(current, name)
            if path not in keep:
                os.unlink(path)
    for current, _dirs, _files in os.walk(top, topdown=False):  # the leads left empty
        if current in keep or any(current.startswith(k + os.sep) for k in keep):
            continue
        try:
            os.rmdir(current)
        except OSError:
            continue
