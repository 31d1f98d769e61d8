"""``kvenv reset``: remove what kvenv owns in a runtime root, nothing else.

A reset is planned first (pure checks on paths), then executed. Refused outright: an empty
path, a path reached through a symlink, the reference system's dangerous paths (``/``,
``$HOME``, ``/root``, ``/home``, ``/usr``, ``/usr/local``, ``/opt``, ``/etc``, ``/var``,
``/tmp``, ``/kaggle``, ``/kaggle/input``, ``/kaggle/working``), the current directory or one
of its parents, a git working tree, and a root without kvenv's ownership marker. Inside an
owned root only kvenv's own names are removed; the root itself only when that leaves it empty.
The cache is kept unless ``purge_cache`` (then only its ``store`` and ``artifacts-v1``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import attrs

from kvenv.env.root import POINTER_NAME, RootLock, is_owned
from kvenv.env.seal import remove_sealed
from kvenv.errors import ConflictError, InputError
from kvenv.model.locations import LOCK_NAME, ROOT_MARKER, Locations

DANGEROUS = (
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
ROOT_NAMES = (
    "generations",
    POINTER_NAME,
    "activate.sh",
    "activate.fish",
    "activate.ps1",
    LOCK_NAME + ".owner",
)
CACHE_NAMES = ("store", "artifacts-v1")
Action = Literal["remove", "absent", "preserve"]


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
) -> ResetPlan:
    """Check the paths and list what a reset would do. Raises when it would be unsafe."""
    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    root = locations.root
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
        for name in ROOT_NAMES:
            path = root / name
            present = path.exists() or path.is_symlink()
            action: Action = "remove" if present else "absent"
            reason = "kvenv runtime state" if present else "path is absent; nothing to remove"
            targets.append(ResetTarget(name, str(path), action, reason))
    else:
        targets.append(
            ResetTarget("root", str(root), "absent", "path is absent; nothing to remove")
        )
    cache = locations.cache
    for name in CACHE_NAMES:
        path = cache / name
        if not purge_cache:
            targets.append(
                ResetTarget(name, str(path), "preserve", "download cache is preserved by default")
            )
            continue
        problem = path_problem(cache, cwd=here, environ=env)
        if problem:
            raise InputError(f"cannot purge cache: {problem}")
        present = path.exists()
        targets.append(
            ResetTarget(
                name,
                str(path),
                "remove" if present else "absent",
                "--purge-cache" if present else "path is absent; nothing to remove",
            )
        )
    return ResetPlan(str(root), str(cache), targets)


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
    for target in plan.targets:
        if target.action != "remove":
            continue
        path = Path(target.path)
        if path.is_symlink() or os.path.realpath(path) != os.path.abspath(path):
            raise ConflictError(
                f"refusing to remove {path}: it became a symlink",
                hint=f"already removed: {', '.join(removed) or 'nothing'}",
            )
        try:
            if path.is_dir():
                remove_sealed(path)  # store entries are read-only
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
        rest = {p.name for p in root.iterdir()}
        if rest <= {ROOT_MARKER, LOCK_NAME, LOCK_NAME + ".owner"}:
            for name in rest:
                (root / name).unlink()
            root.rmdir()
            removed.append(str(root))
    return removed
