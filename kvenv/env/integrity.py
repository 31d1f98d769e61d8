"""What ``kvenv verify`` checks beyond the generation's own files: the sealed store entries the
generation links to (a file of a generation is the store's file: a hard link) and the cached
wheels it was built from; and what ``kvenv cache verify`` checks across the whole cache."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs

from kvenv.env.manifest import Manifest
from kvenv.env.seal import record_problems, seal_problem
from kvenv.env.store import MARKER, lookup
from kvenv.model.locations import Locations


@attrs.frozen
class Damage:
    """One damaged thing: ``kind`` is ``store``, ``cache`` or ``state`` (the pointer or a
    manifest); ``path`` names it."""

    kind: Literal["store", "cache", "state"]
    path: str
    message: str


def store_damage(store: Path, sha256: str) -> Damage | None:
    """A store entry whose seal is broken by anything but a harmless touch (its bytes differ
    from its RECORD, a file was added or removed, or a mode changed)."""
    entry = lookup(store, sha256)
    if entry is None:
        return _bytecode_damage(store / sha256)
    broken = seal_problem(entry.path)
    if broken is None:
        return None
    if broken.kind in ("added", "removed", "mode", "seal"):
        return Damage("store", str(broken.path), f"store entry: {broken.message}")
    problems = record_problems(entry.path / "site", entry.dist.dist_info)
    if problems:
        return Damage("store", str(entry.path), f"store entry damaged: {problems[0]}")
    return None


def _bytecode_damage(path: Path) -> Damage | None:
    """A bytecode entry (:mod:`kvenv.env.bytecode`) or kvenv-lib entry
    (:mod:`kvenv.env.kvenvlib`) whose seal is broken in any way: its bytes are derived (compiled,
    or copied from kvenv's package), so it is removed (``kvenv cache prune``) and made again by
    the next apply, never checked."""
    import json

    from kvenv.env.bytecode import BYTECODE_KIND
    from kvenv.env.kvenvlib import LIB_KIND

    try:
        kind = json.loads((path / MARKER).read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    broken = seal_problem(path) if kind in (BYTECODE_KIND, LIB_KIND) else None
    if broken is None:
        return None
    what = "bytecode entry" if kind == BYTECODE_KIND else "kvenv-lib's store entry"
    return Damage("store", str(broken.path), f"{what}: {broken.message}")


def generation_damage(manifest: Manifest, locations: Locations) -> list[Damage]:
    """The damaged store entries and cached wheels behind ``manifest``'s distributions."""
    from kvenv.fetch.cache import ArtifactCache

    cache = ArtifactCache(locations.cache)
    out: list[Damage] = []
    for dist in manifest.distributions:
        found = store_damage(locations.store, dist.wheel_sha256)
        if found is not None:
            out.append(found)
        problem = cache.check(dist.wheel_sha256, rehash=False)
        if problem is not None:
            out.append(Damage("cache", str(cache.entry(dist.wheel_sha256)), problem))
    if manifest.kvenv_lib is not None:  # kvenv-lib's entry (kvenv.env.kvenvlib): sealed too
        found = _bytecode_damage(locations.store / manifest.kvenv_lib)  # gone: no damage, as
        if found is not None:  # for a wheel's entry (the generation holds its own links)
            out.append(found)
    return out


def cache_damage(locations: Locations, *, rehash: bool = True) -> list[Damage]:
    """Every damaged entry of the whole cache: cached wheels (re-hashed) and store entries."""
    from kvenv.fetch.cache import ArtifactCache

    cache = ArtifactCache(locations.cache)
    out: list[Damage] = []
    for sha in cache.cached():
        problem = cache.check(sha, rehash=rehash)
        if problem is not None:
            out.append(Damage("cache", str(cache.entry(sha)), problem))
    store = locations.store
    if store.is_dir():
        for entry in sorted(store.iterdir()):
            if entry.name.startswith(".") or not (entry / MARKER).is_file():
                continue
            found = store_damage(store, entry.name)
            if found is not None:
                out.append(found)
    return out


STATE_MODE = 0o644  # what kvenv writes the pointer and manifests with (kvenv._util.atomic)


def state_damage(locations: Locations) -> tuple[Manifest | None, list[Damage]]:
    """The current manifest of an owned root and what is wrong with the state files: an
    unreadable or edited pointer or manifest (the pointer records the manifest's sha256), a
    missing pointer while generations exist, or a mode kvenv did not write. ``(None, [])``:
    nothing was ever applied."""
    from kvenv.env.root import POINTER_NAME, current_state, list_generations, manifest_path
    from kvenv.errors import KvenvError

    pointer_path = locations.root / POINTER_NAME
    try:
        pointer, manifest = current_state(locations)
    except KvenvError as exc:
        where = exc.problems[0].file if exc.problems and exc.problems[0].file else pointer_path
        return None, [Damage("state", str(where), exc.message)]
    if pointer is None:
        if list_generations(locations):
            message = f"the generation pointer {pointer_path} is missing"
            return None, [Damage("state", str(pointer_path), message)]
        return None, []
    out: list[Damage] = []
    for path in (pointer_path, manifest_path(locations.root, pointer.generation)):
        mode = path.stat().st_mode & 0o777
        if mode != STATE_MODE:
            message = f"{path} has mode {mode:03o}; kvenv writes it {STATE_MODE:03o}"
            out.append(Damage("state", str(path), message))
    return manifest, out
