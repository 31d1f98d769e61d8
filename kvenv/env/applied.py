"""The applied state as ``kvenv doctor`` sees it: the current generation of a profile's runtime
root, read into a :class:`~kvenv.probe.doctor.Overlay`, or a note saying why there is none."""

from __future__ import annotations

from pathlib import Path

import attrs

from kvenv.env.root import current_manifest
from kvenv.errors import InputError
from kvenv.model.loading import LoadedProfile
from kvenv.model.locations import resolve_locations
from kvenv.probe.doctor import DependencyFinding, Overlay, installed_in


@attrs.frozen
class AppliedState:
    """The profile's applied overlay (None when nothing usable is applied), a note saying what
    was found, and findings about the applied state itself (an unreadable manifest)."""

    overlay: Overlay | None
    note: str
    findings: tuple[DependencyFinding, ...] = ()


def applied_state(loaded: LoadedProfile) -> AppliedState:
    """Read the current generation of ``loaded``'s runtime root for doctor."""
    root = resolve_locations(loaded.profile).root
    try:
        manifest = current_manifest(root)
    except InputError as exc:
        message = "; ".join([exc.message, *(p.render() for p in exc.problems)])
        finding = DependencyFinding(
            "(manifest)", "error", message, "overlay", fix="run `kvenv apply` again"
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
    return AppliedState(overlay, f"generation {manifest.generation} under {root}")
