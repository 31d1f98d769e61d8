"""Where a profile's runtime root and cache are: flag, then environment, then the profile's
``[paths]``, then a per-user default. Pure apart from reading ``os.environ``.

An empty path (``--root ""``, ``KVENV_ROOT=`` set but empty) is refused, never read as "not
given": falling back to the default would act on a directory the user did not name. Each
:class:`Locations` records where its root and cache came from, so messages can say it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

from kvenv.errors import UsageError
from kvenv.model.profile import Profile

ENV_ROOT = "KVENV_ROOT"
ENV_CACHE = "KVENV_CACHE_DIR"
ENV_MANIFEST = "KVENV_MANIFEST"
ROOT_MARKER = ".kvenv-root"
LOCK_NAME = ".kvenv.lock"


# where a root or cache came from, as messages name it
FROM_DEFAULT = "the default"


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


def user_data_dir(environ: Mapping[str, str]) -> Path:
    if sys.platform == "win32":
        return Path(environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "kvenv"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "kvenv"
    xdg = environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "kvenv"


def given_path(value: str | Path, origin: str) -> Path:
    """``value`` as an absolute path; an empty one is a :class:`UsageError` naming ``origin``
    (a flag such as ``--root`` or a variable such as ``$KVENV_ROOT``)."""
    if not str(value).strip():
        raise UsageError(
            f"{origin} is empty: an empty path is refused (it would not name a directory)",
            hint=f"give {origin} a directory, or leave it out to use the default",
        )
    return _absolute(value)


def _from_env(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name)
    return None if value is None else given_path(value, f"${name}")


def default_cache_dir() -> Path:
    """``$KVENV_CACHE_DIR``, else the user cache directory (downloads, store, index pages)."""
    explicit = _from_env(os.environ, ENV_CACHE)
    if explicit is not None:
        return explicit
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "kvenv" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "kvenv"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kvenv"


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(Path(path).expanduser()))


def resolve_locations(
    profile: Profile,
    *,
    root: str | Path | None = None,
    cache: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Locations:
    """The root and cache for ``profile``: flag, environment, ``[paths]``, default (an empty
    flag or variable is refused)."""
    env = os.environ if environ is None else environ
    root_path, root_from = _choose(
        root, "--root", env, ENV_ROOT, profile.paths.root, "the profile's [paths] root"
    )
    if root_path is None:
        root_path = user_data_dir(env) / "runtimes" / profile.name
    cache_path, cache_from = _choose(
        cache, "--cache", env, ENV_CACHE, profile.paths.cache, "the profile's [paths] cache"
    )
    if cache_path is None:
        cache_path = _absolute(default_cache_dir())
    return Locations(root_path, cache_path, root_from, cache_from)


def _choose(
    flag: str | Path | None,
    flag_name: str,
    env: Mapping[str, str],
    env_name: str,
    configured: str | None,
    configured_name: str,
) -> tuple[Path | None, str]:
    if flag is not None:
        return given_path(flag, flag_name), flag_name
    from_env = _from_env(env, env_name)
    if from_env is not None:
        return from_env, f"${env_name}"
    if configured is not None:
        return given_path(configured, configured_name), configured_name
    return None, FROM_DEFAULT
