"""What the start-up paths need to know about a profile, without building the profile.

Loading a profile (TOML, ``extends``, cattrs structuring into the attrs model, every check)
costs more than the whole budget of ``kvenv activate`` (issue 13), and the answer is a pure
function of the profile's files. So once a profile has loaded and validated, the CLI records
its facts (:func:`remember_facts`): name, file, origin, digest, ``[paths]``, ``[host] python``,
the lock's path and the native pin. A later command that needs only these reads the record
(:func:`cached_facts`), which imports nothing heavier than ``json`` (hashing with CPython's own
sha256, not OpenSSL's).

A record is used only while everything that decided it is unchanged, else it is a miss and
the command loads the profile as before (a record never makes a command fail):

- the same reference (name or path), working directory and ``$KVENV_PROFILE_PATH`` /
  ``$KVENV_PROFILE`` (they are the record's key);
- the bytes of every file of the ``extends`` chain (sha256 of each, read again every time:
  profiles are a few KB);
- every directory a name is looked up in (the project's ``profiles/``, each
  ``$KVENV_PROFILE_PATH`` entry, the built-ins, and the directory of every file of the chain)
  by its identity (device, inode, mtime): a profile added, removed or renamed there changes
  the directory's mtime, so a name can never silently resolve to another file;
- kvenv's model code (``kvenv/model/*.py`` and ``kvenv/__init__.py``, by identity): a
  different kvenv (another digest rule, another check) never reuses another's verdict.

Only a profile that loaded without problems is recorded; an invalid one always takes the full
path, which reports every problem.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from kvenv._util import jsonio
from kvenv._util.identity import code_identity, sha256_hex, small_sha256, stat_identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from kvenv.model.loading import LoadedProfile

FACTS_DIR = "profile-facts-v1"
_KEEP = 64  # records kept; the oldest go when more are written


class ProfileFacts:
    """A validated profile's facts, as :func:`remember_facts` recorded them."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    @property
    def name(self) -> str:
        return str(self._data["name"])

    @property
    def path(self) -> Path:
        return Path(self._data["path"])

    @property
    def origin(self) -> str:
        return str(self._data["origin"])

    @property
    def digest(self) -> str:
        return str(self._data["digest"])

    @property
    def chain(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p, _ in self._data["files"])

    @property
    def configured_root(self) -> str | None:
        value = self._data["paths_root"]
        return None if value is None else str(value)

    @property
    def configured_cache(self) -> str | None:
        value = self._data["paths_cache"]
        return None if value is None else str(value)

    @property
    def host_python(self) -> Path | None:
        value = self._data["host_python"]
        return None if value is None else Path(value)

    @property
    def lock_path(self) -> Path:
        return Path(self._data["lock"])

    @property
    def has_target(self) -> bool:
        return bool(self._data["has_target"])

    @property
    def native(self) -> dict[str, Any] | None:
        """name, version, sha256, size (or None) and kind of the pinned native wheel; None
        for a profile that pins none."""
        native = self._data["native"]
        return None if native is None else dict(native)

    @property
    def owner(self) -> tuple[str, str | None]:
        """(name, file) as a runtime root records its owner (the file is None for a
        built-in profile), as :func:`kvenv.env.root.owner_of` gives it; the name alone decides
        ownership, the file is for messages."""
        return self.name, (None if self.origin == "builtin" else str(self.path.resolve()))


def facts_dir(cache: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Where records live: under the memo's root (:func:`kvenv.model.places.memo_root`)."""
    from kvenv.model.places import memo_root

    return memo_root(cache, environ) / FACTS_DIR


def _key(ref: str | None, cwd: Path, env: Mapping[str, str], code: list[list[Any]]) -> str:
    """The record's name: what names the profile, and the model code that reads it (two kvenv
    installs sharing a cache keep their own records instead of replacing each other's)."""
    from kvenv import __version__
    from kvenv.model.places import ENV_DEFAULT, ENV_PATH

    parts = [__version__, ref, str(cwd), env.get(ENV_PATH), None if ref else env.get(ENV_DEFAULT)]
    return sha256_hex(json.dumps([*parts, code]).encode())[:32]


def _lookup_dirs(chain: list[Path], cwd: Path, env: Mapping[str, str]) -> list[str]:
    from kvenv._util.resources import data_dir
    from kvenv.model.places import ENV_PATH

    dirs = [cwd / "profiles"]
    dirs += [Path(e).expanduser() for e in env.get(ENV_PATH, "").split(os.pathsep) if e]
    dirs.append(data_dir("profiles"))
    dirs += [p.parent for p in chain]
    return list(dict.fromkeys(str(d) for d in dirs))


def remember_facts(
    loaded: LoadedProfile,
    ref: str | None,
    *,
    cache: str | Path | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Record ``loaded`` (loaded from ``ref``, valid) for :func:`cached_facts`, unless a
    current record is already there. Best effort: a record that cannot be written (an
    unwritable or blank cache) is simply not there next time.

    The chain's files are recorded by the sha256 of the bytes the loader parsed
    (``loaded.chain_sha256``), so a file edited after it was read is a miss next time, never
    a record of the old verdict under the new bytes."""
    from kvenv.errors import KvenvError

    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    chain = list(loaded.chain)
    if len(loaded.chain_sha256) != len(chain):
        return  # built without the loader's digests: nothing to vouch for
    try:
        if cached_facts(ref, cache=cache, cwd=here, environ=env) is not None:
            return
        directory = facts_dir(cache, env)
        data = _record(loaded, here, env)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"{_key(ref, here, env, data['code'])}.json"
        from kvenv._util.atomic import write_bytes

        write_bytes(target, json.dumps(data, sort_keys=True).encode(), durable=False)
        _trim(directory)
    except (OSError, KvenvError):
        return


def _record(loaded: LoadedProfile, here: Path, env: Mapping[str, str]) -> dict[str, Any]:
    chain = list(loaded.chain)
    profile = loaded.profile
    native = profile.native
    host_python = loaded.host_python_path
    return {
        "files": [[str(p), sha] for p, sha in zip(chain, loaded.chain_sha256, strict=True)],
        "dirs": [[d, stat_identity(d)] for d in _lookup_dirs(chain, here, env)],
        "code": code_identity(),
        "name": profile.name,
        "path": str(loaded.path),
        "origin": loaded.origin,
        "digest": loaded.digest,
        "paths_root": profile.paths.root,
        "paths_cache": profile.paths.cache,
        "host_python": None if host_python is None else str(host_python),
        "lock": str(loaded.lock_path),
        "has_target": profile.target is not None,
        "native": None
        if native is None
        else {
            "name": native.name,
            "version": native.version,
            "sha256": native.sha256,
            "size": native.size,
            "kind": native.source.kind,
        },
    }


def _trim(directory: Path) -> None:
    entries = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:-_KEEP]:
        old.unlink(missing_ok=True)


def cached_facts(
    ref: str | None,
    *,
    cache: str | Path | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProfileFacts | None:
    """The recorded facts of the profile ``ref`` names, or None (no record, or anything that
    decided it changed: see the module's docstring)."""
    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    from kvenv.errors import KvenvError

    code = code_identity()
    try:
        record = facts_dir(cache, env) / f"{_key(ref, here, env, code)}.json"
        data = jsonio.loads_json(record.read_bytes(), file=str(record))
    except (OSError, ValueError, KvenvError):  # KvenvError: a blank cache path
        return None
    try:
        if data["code"] != code:
            return None
        for path, sha in data["files"]:
            if small_sha256(path) != sha:
                return None
        for directory, identity in data["dirs"]:
            if stat_identity(directory) != identity:
                return None
        if not _well_formed(data):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return ProfileFacts(data)


def _well_formed(data: Mapping[str, Any]) -> bool:
    strings = ("name", "path", "origin", "digest", "lock")
    optional = ("paths_root", "paths_cache", "host_python")
    native = data["native"]
    return (
        all(isinstance(data[k], str) for k in strings)
        and all(data[k] is None or isinstance(data[k], str) for k in optional)
        and isinstance(data["has_target"], bool)
        and (
            native is None
            or (
                isinstance(native, dict)
                and all(
                    isinstance(native.get(k), str) for k in ("name", "version", "sha256", "kind")
                )
            )
        )
    )
