"""Where a profile's runtime root and cache are: flag, then environment, then the profile's
``[paths]``, then a per-user default. Pure apart from reading ``os.environ``.

An empty path (``--root ""``, ``KVENV_ROOT=`` set but empty) is refused, never read as "not
given": falling back to the default would act on a directory the user did not name. Each
:class:`Locations` records where its root and cache came from, so messages can say it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from kvenv.model.places import (
    ENV_CACHE,
    ENV_MANIFEST,
    ENV_ROOT,
    FROM_DEFAULT,
    LOCK_NAME,
    ROOT_MARKER,
    choose_places,
    default_cache_dir,
    given_path,
    user_data_dir,
)
from kvenv.model.profile import Profile

__all__ = [
    "ENV_CACHE",
    "ENV_MANIFEST",
    "ENV_ROOT",
    "FROM_DEFAULT",
    "LOCK_NAME",
    "ROOT_MARKER",
    "Locations",
    "default_cache_dir",
    "given_path",
    "resolve_locations",
    "user_data_dir",
]


@attrs.frozen
class Locations:
    root: Path
    cache: Path
    root_from: str = FROM_DEFAULT  # "--root", "$KVENV_ROOT", "the profile's [paths] root", ...
    cache_from: str = FROM_DEFAULT

    @property
    def store(self) -> Path:
        return self.cache / "store"

    @property
    def generations(self) -> Path:
        return self.root / "generations"

    @property
    def marker(self) -> Path:
        return self.root / ROOT_MARKER

    @property
    def lock(self) -> Path:
        return self.root / LOCK_NAME


def resolve_locations(
    profile: Profile,
    *,
    root: str | Path | None = None,
    cache: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Locations:
    """The root and cache for ``profile``: flag, environment, ``[paths]``, default (an empty
    flag or variable is refused)."""
    root_path, root_from, cache_path, cache_from = choose_places(
        profile.name,
        root=root,
        cache=cache,
        configured_root=profile.paths.root,
        configured_cache=profile.paths.cache,
        environ=os.environ if environ is None else environ,
    )
    return Locations(root_path, cache_path, root_from, cache_from)
