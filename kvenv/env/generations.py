"""The generations a runtime root keeps: what each one is (``kvenv generations``), what the
current one holds (``kvenv list``), switching back to one (``kvenv rollback``), and how many
an apply keeps (:func:`retained`, :func:`keep_count`).

A rollback is one :func:`kvenv.env.rootfiles.write_pointer`, under the root lock, to a kept
generation that still verifies (every file against its RECORD, the sealed store entries and
cached wheels behind it): a generation that does not is refused, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import attrs

from kvenv._util import memo
from kvenv.env.keep import DEFAULT_KEEP, KEEP_ENV, MIN_KEEP, keep_count
from kvenv.env.manifest import MANIFEST_NAME, Manifest, read_manifest
from kvenv.env.root import (
    RootLock,
    generation_dir,
    list_generations,
    manifest_path,
    read_pointer,
)
from kvenv.env.rootfiles import write_pointer
from kvenv.errors import CheckFailed, InputError, KvenvError, Problem
from kvenv.model.locations import Locations

__all__ = ["DEFAULT_KEEP", "KEEP_ENV", "MIN_KEEP", "keep_count"]

DistOrigin = Literal["native", "overlay", "host"]


def _ignore(_: str) -> None:
    return None


def _made_at(locations: Locations, generation: str) -> tuple[int, str]:
    """When ``generation`` was finished (its manifest is written last; the directory for an
    unfinished one), to the nanosecond: ids name the second only, and two applies can finish
    within one."""
    directory = generation_dir(locations.root, generation)
    for path in (directory / MANIFEST_NAME, directory):
        try:
            return path.stat().st_mtime_ns, generation
        except OSError:
            continue
    return 0, generation


def ordered_generations(locations: Locations) -> list[str]:
    """Every generation directory of the root, oldest first."""
    return sorted(list_generations(locations), key=lambda g: _made_at(locations, g))


def complete_generations(locations: Locations) -> list[str]:
    """The generations of the root that have a manifest (finished), oldest first."""
    generations = ordered_generations(locations)
    found = [(g, generation_dir(locations.root, g) / MANIFEST_NAME) for g in generations]
    for _, path in found:
        memo.note("stat", str(path))  # the recording seam: asked, not read
    return [g for g, path in found if path.is_file()]


def retained(must: Iterable[str], complete: Sequence[str], keep: int) -> set[str]:
    """The generations to keep: ``must`` (the current one and the one current before it),
    then the newest of the ``complete`` others (oldest first) until there are ``keep``."""
    kept = {g for g in must if g}
    others = [g for g in reversed(complete) if g not in kept]
    return kept | set(others[: max(0, keep - len(kept))])


# -- what there is -------------------------------------------------------------------------


@attrs.frozen
class GenerationInfo:
    """One kept generation as ``kvenv generations`` shows it; ``complete`` is False for one
    without a readable manifest (an apply that did not finish, or damage: ``note`` says)."""

    generation: str
    current: bool
    complete: bool
    created_at: str | None = None
    profile: str | None = None
    profile_digest: str | None = None
    lock_digest: str | None = None
    native: str | None = None
    distributions: int = 0
    kvenv_version: str | None = None
    note: str | None = None


def generation_infos(locations: Locations) -> list[GenerationInfo]:
    """Every generation directory of the root, oldest first, with what its manifest says."""
    pointer = read_pointer(locations.root) if locations.root.is_dir() else None
    current = pointer.generation if pointer else None
    out: list[GenerationInfo] = []
    for generation in ordered_generations(locations):
        path = manifest_path(locations.root, generation)
        if not path.is_file():
            out.append(GenerationInfo(generation, generation == current, False, note="no manifest"))
            continue
        try:
            manifest = read_manifest(path, root=locations.root)
        except KvenvError as exc:
            out.append(GenerationInfo(generation, generation == current, False, note=exc.message))
            continue
        native = manifest.native
        out.append(
            GenerationInfo(
                generation,
                generation == current,
                True,
                created_at=manifest.created_at,
                profile=manifest.profile.name,
                profile_digest=manifest.profile.digest,
                lock_digest=manifest.lock_digest,
                native=f"{native.name} {native.version}" if native else None,
                distributions=len(manifest.distributions),
                kvenv_version=manifest.kvenv_version,
            )
        )
    return out


@attrs.frozen
class InstalledRow:
    """One distribution of a generation as ``kvenv list`` shows it: from the native wheel, an
    overlay wheel, or a protected host package the generation was applied over (its version
    as it was then; None when the host had none recorded)."""

    name: str
    version: str | None
    origin: DistOrigin
    location: str | None = None


def installed_rows(manifest: Manifest) -> list[InstalledRow]:
    """The distributions of ``manifest``'s generation (native, then overlay, by name), then the
    protected host packages it recorded as present on the host (those the host lacked are
    :func:`absent_protected`, not rows: nothing is installed under their name)."""
    order = {"native": 0, "overlay": 1}
    rows = [
        InstalledRow(
            d.name,
            d.version,
            d.layer,
            manifest.dirs.native if d.layer == "native" else manifest.dirs.overlay,
        )
        for d in sorted(manifest.distributions, key=lambda d: (order[d.layer], d.name))
    ]
    rows += [
        InstalledRow(p.name, p.version, "host", p.location)
        for p in sorted(manifest.host_protected, key=lambda p: p.name)
        if p.version is not None or p.location is not None
    ]
    return rows


def absent_protected(manifest: Manifest) -> list[str]:
    """The protected packages the host lacked when ``manifest``'s generation was applied."""
    return sorted(
        p.name for p in manifest.host_protected if p.version is None and p.location is None
    )


# -- going back ------------------------------------------------------------------------------


@attrs.frozen
class RollbackResult:
    """``previous`` was current; ``generation`` is now (equal when it already was)."""

    root: str
    generation: str
    previous: str | None
    manifest: str

    @property
    def changed(self) -> bool:
        return self.generation != self.previous


def rollback_target(kept: Sequence[str], current: str | None, requested: str | None) -> str:
    """The generation to switch to: ``requested`` when it is one of ``kept`` (complete ones,
    oldest first), else the newest kept generation older than ``current``."""
    if requested is not None:
        if requested not in kept:
            raise InputError(
                f"no kept generation {requested!r}",
                hint="`{kvenv generations}` lists the kept ones"
                + (f" ({', '.join(kept)})" if kept else ""),
            )
        return requested
    older = list(kept[: kept.index(current)] if current in kept else kept)
    if not older:
        raise InputError(
            "there is no older kept generation to roll back to",
            hint="`{kvenv generations}` lists the kept ones; name one: `{kvenv rollback ID}`",
        )
    return older[-1]


def rollback(
    locations: Locations,
    requested: str | None = None,
    *,
    wait: bool = True,
    on_wait: Callable[[str], None] = _ignore,
    jobs: int = 8,
) -> RollbackResult:
    """Make ``requested`` (default: the newest generation older than the current one) the
    current generation, atomically, under the root lock; refused with :class:`CheckFailed`
    when it does not verify, and nothing is changed."""
    from kvenv.env.activation import write_shims
    from kvenv.env.root import dirs_present
    from kvenv.env.verify import verify

    root = locations.root
    pointer = read_pointer(root) if root.is_dir() else None
    if pointer is None:
        raise InputError(f"nothing is applied in {root}", hint="run `{kvenv apply}` first")
    with RootLock(locations, wait=wait, on_wait=on_wait):
        pointer = read_pointer(root)  # another apply may have switched while we waited
        current = pointer.generation if pointer else None
        target = rollback_target(complete_generations(locations), current, requested)
        path = manifest_path(root, target)
        manifest = read_manifest(path, root=root)
        if target == current:
            return RollbackResult(str(root), target, current, str(path))
        drifts = verify(manifest, None, jobs=jobs, locations=locations)
        if not drifts and not dirs_present(manifest):
            raise CheckFailed(f"generation {target} is missing a directory")
        if drifts:
            raise CheckFailed(
                f"generation {target} no longer verifies ({len(drifts)} problem(s)); "
                "the current generation is unchanged",
                problems=[Problem(d.message) for d in drifts[:50]],
                hint="roll back to another kept generation, or build a fresh one: `{kvenv apply}`",
            )
        write_pointer(root, target, current)
        write_shims(locations, manifest)
    return RollbackResult(str(root), target, current, str(path))
