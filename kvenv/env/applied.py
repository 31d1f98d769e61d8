"""The applied state of a profile's runtime root, as ``kvenv status`` reports it
(:func:`root_status`) and as ``kvenv doctor`` checks it (:func:`applied_state`: the current
generation read into a :class:`~kvenv.probe.doctor.InstalledOverlay`, or a note saying why
there is none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kvenv.env.root import (
    current_manifest,
    current_state,
    foreign_owner,
    is_owned,
    list_generations,
    manifest_path,
    owner_of,
    read_owner,
)
from kvenv.errors import InputError, IntegrityError, LockError
from kvenv.lock.input import profile_lock
from kvenv.model.loading import LoadedProfile
from kvenv.model.locations import Locations, resolve_locations
from kvenv.probe.doctor import DependencyFinding, InstalledOverlay, installed_in


@attrs.frozen
class AppliedState:
    """The profile's applied overlay (None when nothing usable is applied), a note saying what
    was found, and findings about the applied state itself (an unreadable manifest)."""

    overlay: InstalledOverlay | None
    note: str
    findings: tuple[DependencyFinding, ...] = ()
    python: str | None = None  # the host interpreter the current generation was applied for


def applied_state(loaded: LoadedProfile) -> AppliedState:
    """Read the current generation of ``loaded``'s runtime root for doctor."""
    root = resolve_locations(loaded.profile).root
    other = foreign_owner(root, owner_of(loaded))
    if other is not None:
        return AppliedState(None, f"{root} belongs to profile {other.describe()}, not this one")
    try:
        manifest = current_manifest(root)
    except (InputError, IntegrityError) as exc:
        message = "; ".join([exc.message, *(p.render() for p in exc.problems)])
        finding = DependencyFinding(
            "(manifest)", "error", message, "overlay", fix="rebuild it: `{kvenv apply --repair}`"
        )
        return AppliedState(None, f"the applied state under {root} is unreadable", (finding,))
    if manifest is None:
        return AppliedState(None, f"no overlay applied (nothing under {root})")
    if manifest.profile.name != loaded.profile.name:
        return AppliedState(None, f"{root} holds profile {manifest.profile.name!r}, not this one")
    expected = [(d.name, d.version, d.layer) for d in manifest.distributions]
    dirs = [Path(manifest.dirs.native), Path(manifest.dirs.overlay)]
    native = manifest.native.name if manifest.native else None
    overlay = installed_in(manifest.generation, expected, dirs, native)
    note = f"generation {manifest.generation} under {root}"
    return AppliedState(overlay, note, python=manifest.python)


def root_status(loaded: LoadedProfile, locations: Locations) -> dict[str, Any]:
    """What ``kvenv status --json`` reports: the root, its generations, what is applied and
    whether it is current for this profile, lock and native wheel."""
    data: dict[str, Any] = {
        "profile": loaded.profile.name,
        "root": str(locations.root),
        "cache": str(locations.cache),
        "applied": False,
        "current": False,
        "generation": None,
        "generations": [],
    }
    if not is_owned(locations.root):
        return data
    owner = read_owner(locations.root)
    if owner is not None:
        data["owner"] = {"name": owner.name, "file": owner.file}
        data["owned"] = owner == owner_of(loaded)
        if not data["owned"]:
            return data  # another profile's runtime: nothing of this one is applied here
    pointer, manifest = current_state(locations)
    data["generations"] = list_generations(locations)
    if manifest is None or pointer is None:
        return data
    try:
        lock = profile_lock(loaded)
    except LockError as exc:  # never locked, or unreadable: not current, and status says why
        lock = None
        data["lock_problem"] = exc.message
    native = loaded.profile.native
    data.update(
        applied=True,
        generation=manifest.generation,
        previous=pointer.previous,
        applied_profile=manifest.profile.name,
        applied_at=manifest.created_at,
        manifest=str(manifest_path(locations.root, manifest.generation)),
        distributions=len(manifest.distributions),
        python=manifest.python,  # the host interpreter it was applied for
        current="lock_problem" not in data
        and manifest.matches(
            loaded.digest, lock.digest if lock else None, native.sha256 if native else None
        ),
    )
    return data
