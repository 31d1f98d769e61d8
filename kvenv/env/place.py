"""Where a command acts, resolved in one place: the profile, its runtime root and cache, the
root's owner, the host interpreter and the current generation. Every CLI command that names a
profile (through :func:`kvenv.cli.apply._load`), ``kvenv.activate()`` and ``kvenv.runtime``
(through :func:`kvenv.env.activation.locate_manifest`), ``kvenv cache`` with a profile and the
cluster's nodes and workers call :func:`find_place`, so they read the same environment
variables in the same order and say the same things. The order of each lookup is the table of
``docs/places.md``:

- profile: the argument (a name, looked up in ``./profiles``, ``$KVENV_PROFILE_PATH``, the
  built-ins; or a path), else ``$KVENV_PROFILE``, else the default profile;
- root: ``--root``, ``$KVENV_ROOT``, the profile's ``[paths] root``, the per-user default
  ``<user data>/kvenv/runtimes/<name>`` (by the profile's *name*: the same profile read from
  anywhere has the same default root);
- cache: ``--cache``, ``$KVENV_CACHE_DIR``, the profile's ``[paths] cache``, the user cache;
- owner: the profile's name (:class:`kvenv.env.root.RootOwner`);
- host interpreter: ``--python``, ``$KVENV_PYTHON``, the profile's ``[host] python``, the
  active environment, ``python3`` on ``PATH`` (:mod:`kvenv.probe.interpreter`);
- generation: the root's ``current.json``, its manifest checked against the pointer's digest.

The start-up paths (``kvenv activate``, ``run``, the no-op ``apply``) apply the same rules to a
profile's recorded facts without loading it (:func:`kvenv.model.places.choose_places`, which
:func:`kvenv.model.locations.resolve_locations` also uses; :mod:`kvenv.env.runenv`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvenv.env.root import RootOwner
    from kvenv.model.loading import LoadedProfile
    from kvenv.model.locations import Locations
    from kvenv.probe.interpreter import HostPython


@attrs.frozen
class Place:
    """A loaded profile and where it lives: its root and cache, each with where it came from."""

    loaded: LoadedProfile
    locations: Locations

    @property
    def owner(self) -> RootOwner:
        """The owner the root records for this profile (its name)."""
        from kvenv.env.root import owner_of

        return owner_of(self.loaded)

    def check_owner(self) -> None:
        """Refuse (:class:`kvenv.errors.ConflictError`) when the root belongs to another
        profile, naming both and the fix."""
        from kvenv.env.root import check_owner

        check_owner(self.locations.root, self.owner)

    def current_manifest_path(self) -> Path | None:
        """The current generation's manifest (checked against the pointer), or None when
        nothing is applied."""
        from kvenv.env.root import current_manifest_path

        return current_manifest_path(self.locations.root)

    def host_python(
        self, flag: str | None = None, environ: Mapping[str, str] | None = None
    ) -> HostPython:
        """The host interpreter for this profile (:func:`host_python_of`)."""
        return host_python_of(self.loaded, flag, environ)


def host_python_of(
    loaded: LoadedProfile, flag: str | None = None, environ: Mapping[str, str] | None = None
) -> HostPython:
    """The host interpreter for ``loaded``: ``flag`` (``--python``), ``$KVENV_PYTHON``, its
    ``[host] python``, the active environment, ``python3`` on ``PATH``."""
    from kvenv.probe.interpreter import resolve_host_python

    path = loaded.host_python_path
    return resolve_host_python(
        flag=flag,
        environ=os.environ if environ is None else environ,
        profile_value=str(path) if path is not None else None,
        profile_file=str(loaded.path),
    )


def find_place(
    profile: str | None,
    *,
    root: str | Path | None = None,
    cache: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Place:
    """The profile ``profile`` names (None: ``$KVENV_PROFILE``, else the default) and its root
    and cache (flags ``root``/``cache``, else the environment, the profile's ``[paths]``, the
    defaults): see the module docstring. A root or cache that is a file is refused here
    (:func:`kvenv.env.placecheck.refuse_file_places`), for every caller alike."""
    from kvenv.env.placecheck import refuse_file_places
    from kvenv.model.loading import load_profile
    from kvenv.model.locations import resolve_locations

    loaded = load_profile(profile)
    locations = resolve_locations(loaded.profile, root=root, cache=cache, environ=environ)
    refuse_file_places(locations)  # a root or cache that is a file: fixed where it was set
    return Place(loaded, locations)
