"""Where things are, without the model: the environment variables, the per-user defaults,
and the rule that picks a runtime root or cache (flag, then environment, then the profile's
``[paths]``, then the default). Pure apart from reading ``os.environ``; imports nothing heavy,
so the start-up paths (``kvenv activate``) can place a root without building a profile.

An empty path (``--root ""``, ``KVENV_ROOT=`` set but empty) is refused, never read as "not
given": falling back to the default would act on a directory the user did not name. Every path
chosen here is canonical (absolute, symlinks resolved: :func:`canonical`), so a root reached
through a symlink is the same root as its real path for every check and record."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from kvenv.errors import UsageError

ENV_ROOT = "KVENV_ROOT"
ENV_CACHE = "KVENV_CACHE_DIR"
ENV_MANIFEST = "KVENV_MANIFEST"
ENV_PATH = "KVENV_PROFILE_PATH"  # directories searched for profiles by name
ENV_DEFAULT = "KVENV_PROFILE"  # the profile used when a command names none
DEFAULT_PROFILE = "kaggle-t4x2-cu128"  # ... and when that is unset
ROOT_MARKER = ".kvenv-root"
LOCK_NAME = ".kvenv.lock"


# where a root or cache came from, as messages name it
FROM_DEFAULT = "the default"


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
    path = Path(os.path.abspath(Path(value).expanduser()))
    if os.path.islink(path) and not os.path.exists(path):
        raise UsageError(
            f"{origin} is a dangling symlink: {path} -> {os.readlink(path)}",
            hint=f"point {origin} at a directory, or remove the symlink {path}",
        )
    return canonical(path)


def from_env(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name)
    return None if value is None else given_path(value, f"${name}")


def default_cache_dir() -> Path:
    """``$KVENV_CACHE_DIR``, else the user cache directory (downloads, store, index pages)."""
    explicit = from_env(os.environ, ENV_CACHE)
    if explicit is not None:
        return explicit
    return user_cache_dir()


def memo_root(cache: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The user's own cache directory, where kvenv keeps its memo (:mod:`kvenv._util.memo`):
    ``--cache`` when given, else ``$KVENV_CACHE_DIR``, else the user cache. Never a profile's
    ``[paths] cache`` (not known before the profile is loaded, and not the user's: a pure
    command writes nothing there)."""
    env = os.environ if environ is None else environ
    if cache is not None:
        return given_path(cache, "--cache")
    if env.get(ENV_CACHE):
        return given_path(env[ENV_CACHE], f"${ENV_CACHE}")
    return default_cache_dir()


def user_cache_dir() -> Path:
    """The user's cache directory for kvenv, whatever ``$KVENV_CACHE_DIR`` says."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "kvenv" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "kvenv"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kvenv"


def canonical(path: str | Path) -> Path:
    """``path`` absolute, ``~`` expanded and every symlink resolved (as far as it exists): the
    one spelling of a root or cache that ownership checks, markers and manifests compare."""
    return Path(os.path.realpath(Path(path).expanduser()))


_absolute = canonical


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
    found = from_env(env, env_name)
    if found is not None:
        return found, f"${env_name}"
    if configured is not None:
        return given_path(configured, configured_name), configured_name
    return None, FROM_DEFAULT


def choose_places(
    name: str,
    *,
    root: str | Path | None,
    cache: str | Path | None,
    configured_root: str | None,
    configured_cache: str | None,
    environ: Mapping[str, str],
) -> tuple[Path, str, Path, str]:
    """(root, where from, cache, where from) for the profile ``name`` whose ``[paths]`` say
    ``configured_root``/``configured_cache``: flag, environment, profile, default."""
    root_path, root_from = _choose(
        root, "--root", environ, ENV_ROOT, configured_root, "the profile's [paths] root"
    )
    if root_path is None:
        root_path = canonical(user_data_dir(environ) / "runtimes" / name)
    cache_path, cache_from = _choose(
        cache, "--cache", environ, ENV_CACHE, configured_cache, "the profile's [paths] cache"
    )
    if cache_path is None:
        cache_path = _absolute(default_cache_dir())
    return root_path, root_from, cache_path, cache_from
