"""Keeping the cache directory healthy (``kvenv cache verify|prune|clean``, uv's counterparts):
prune removes what is damaged or unfinished, clean removes kvenv's cache contents. Only kvenv's
own names under the cache directory are ever touched."""

from __future__ import annotations

import re
from pathlib import Path

from kvenv.env.integrity import Damage, cache_damage
from kvenv.env.reset import CACHE_NAMES
from kvenv.env.seal import remove_sealed
from kvenv.env.store import MARKER
from kvenv.model.locations import Locations

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _unfinished(locations: Locations) -> list[Path]:
    """Leftovers of killed runs: the store's temporary and marker-less entries, and partial
    downloads."""
    found: list[Path] = []
    store = locations.store
    if store.is_dir():  # only names kvenv gives: a temporary entry, or a sha256 without marker
        for entry in sorted(store.iterdir()):
            if entry.is_symlink():
                continue
            if entry.name.startswith(".tmp-") or (
                _SHA256.fullmatch(entry.name) and entry.is_dir() and not (entry / MARKER).is_file()
            ):
                found.append(entry)
    tmp = locations.cache / "artifacts-v1" / "tmp"
    if tmp.is_dir():
        found.extend(sorted(tmp.iterdir()))
    return found


def prune(locations: Locations, *, dry_run: bool = False) -> tuple[list[Damage], list[str]]:
    """Remove the damaged cached wheels and store entries (cheap checks; a changed file is
    re-hashed) and the leftovers of killed runs. Returns the damage found and what was removed
    (or would be, with ``dry_run``)."""
    damage = cache_damage(locations, rehash=False)
    targets = [Path(d.path) for d in damage]
    targets += _unfinished(locations)
    removed: list[str] = []
    for path in targets:
        entry = _entry_of(path, locations)
        if entry is None or not entry.exists():
            continue
        if not dry_run:
            remove_sealed(entry)
        removed.append(str(entry))
    return damage, removed


def _entry_of(path: Path, locations: Locations) -> Path | None:
    """The store entry or cache entry directory ``path`` belongs to (None: not kvenv's)."""
    for base in (locations.store, locations.cache / "artifacts-v1"):
        try:
            rel = path.relative_to(base)
        except ValueError:
            continue
        parts = rel.parts
        if base == locations.store and parts:
            return base / parts[0]
        if parts[:1] == ("tmp",) and len(parts) >= 2:
            return base / "tmp" / parts[1]
        if parts[:1] == ("sha256",) and len(parts) >= 3:
            return base.joinpath(*parts[:3])
    return None


def clean(locations: Locations, *, dry_run: bool = False) -> list[str]:
    """Remove the store and the downloaded artifacts (kvenv's names only); applied
    generations keep working (their files are hard links), a later apply downloads again.
    What holds another runtime root (an older kvenv let one be placed in a cache) is kept,
    with the directories above it."""
    from kvenv.env.placecheck import holds_a_root

    removed: list[str] = []
    for name in CACHE_NAMES:
        path = locations.cache / name
        if not path.exists() or path.is_symlink():
            continue
        if not holds_a_root(path):
            if not dry_run:
                remove_sealed(path)
            removed.append(str(path))
            continue
        for entry in sorted(path.iterdir()):
            if entry.is_symlink() or holds_a_root(entry):
                continue
            if not dry_run:
                remove_sealed(entry)
            removed.append(str(entry))
    return removed
