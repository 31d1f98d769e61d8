"""Where a profile's runtime root and cache are: flag, then environment, then the profile's
``[paths]``, then a per-user default. Pure apart from reading ``os.environ``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

from kvenv.model.profile import Profile

ENV_ROOT = "KVENV_ROOT"
ENV_CACHE = "KVENV_CACHE_DIR"
ENV_MANIFEST = "KVENV_MANIFEST"
ROOT_MARKER = ".kvenv-root"
LOCK_NAME = ".kvenv.lock"


@attrs.frozen
class Locations:
    root: Path
    cache: Path

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


def default_cache_dir() -> Path:
    """``$KVENV_CACHE_DIR``, else the user cache directory (downloads, store, index pages)."""
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit).expanduser()
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
    env = os.environ if environ is None else environ
    chosen_root = root or env.get(ENV_ROOT) or profile.paths.root
    if chosen_root:
        root_path = _absolute(chosen_root)
    else:
        root_path = user_data_dir(env) / "runtimes" / profile.name
    chosen_cache = cache or env.get(ENV_CACHE) or profile.paths.cache or default_cache_dir()
    cache_path = _absolute(chosen_cache)
    return Locations(root_path, cache_path)
