"""What the start-up paths need to know about a profile, without building the profile.

Loading a profile (TOML, ``extends``, cattrs structuring into the attrs model, every check)
costs more than the whole budget of ``kvenv activate`` (issue 13), and the answer is a pure
function of the profile's files. So once a profile has loaded and validated, the CLI keeps its
facts (:func:`remember_facts`) as the memo kind ``profile-facts`` (:mod:`kvenv._util.memo`):
name, file, origin, digest, ``[paths]``, ``[host] python``, the lock's path and the native
pin. A later command that needs only these asks the memo (:func:`cached_facts`), which imports
nothing heavier than ``json``.

The key is what names the profile (:func:`profile_key`: the reference, the working directory,
``$KVENV_PROFILE_PATH``, and ``$KVENV_PROFILE`` when no reference is given). The dependencies
are what the loader noted while it loaded (:attr:`kvenv.model.loading.LoadedProfile.reads`):
the sha256 of the very bytes it parsed of every file of the ``extends`` chain, and every
directory it looked a name up in by identity (a profile added, removed or renamed there changes
the directory's mtime, so a name never silently resolves to another file). The memo adds
kvenv's own code. Anything changed, or a damaged record, is a miss: the command loads the
profile as before (a record never makes a command fail). Only a profile that loaded without
problems is kept; an invalid one always takes the full path, which reports every problem.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kvenv._util import memo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from kvenv.model.loading import LoadedProfile

FACTS_KIND = "profile-facts"
_TEXT = ("name", "path", "origin", "digest", "lock")
_OPTIONAL = ("paths_root", "paths_cache", "host_python")
_NATIVE = ("name", "version", "sha256", "kind")


class ProfileFacts:
    """A validated profile's facts, as :func:`remember_facts` kept them."""

    __slots__ = ("_data",)

    def __init__(self, data: Any) -> None:
        """The facts of ``data``; TypeError or KeyError when it has another shape."""
        native = data["native"]
        if not (
            all(isinstance(data[k], str) for k in _TEXT)
            and all(data[k] is None or isinstance(data[k], str) for k in _OPTIONAL)
            and isinstance(data["chain"], list)
            and all(isinstance(p, str) for p in data["chain"])
            and (native is None or all(isinstance(native[k], str) for k in _NATIVE))
        ):
            raise TypeError("not the facts of a profile")
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
        return tuple(Path(p) for p in self._data["chain"])

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


def profile_key(
    ref: str | None, cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[Any]:
    """What names a profile, the key of every memo of a profile's verdict: the reference, the
    working directory, ``$KVENV_PROFILE_PATH``, and ``$KVENV_PROFILE`` when ``ref`` is None."""
    from kvenv.model.places import ENV_DEFAULT, ENV_PATH

    env = os.environ if environ is None else environ
    default = None if ref else env.get(ENV_DEFAULT)
    return [ref, str(cwd or Path.cwd()), env.get(ENV_PATH), default]


def _root(cache: str | Path | None, environ: Mapping[str, str] | None) -> Path | None:
    """The memo root, or None for a blank ``--cache`` or ``$KVENV_CACHE_DIR`` (a miss: the
    full path reports it)."""
    from kvenv.errors import KvenvError
    from kvenv.model.places import memo_root

    try:
        return memo_root(cache, environ)
    except KvenvError:
        return None


def remember_facts(
    loaded: LoadedProfile,
    ref: str | None,
    *,
    cache: str | Path | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Keep the facts of ``loaded`` (loaded from ``ref``, valid) for :func:`cached_facts`,
    unless a current record is already there; valid while what the loader read is unchanged
    (the bytes it parsed: a file edited after it was read is a miss next time). Best effort."""
    root = _root(cache, environ)
    if root is None or not loaded.reads:  # not built by the loader: nothing to vouch for
        return
    key = profile_key(ref, cwd, environ)
    if memo.get(root, FACTS_KIND, key) is None:
        memo.put(root, FACTS_KIND, key, list(loaded.reads), _facts_of(loaded))


def _facts_of(loaded: LoadedProfile) -> dict[str, Any]:
    profile = loaded.profile
    native = profile.native
    host_python = loaded.host_python_path
    return {
        "chain": [str(p) for p in loaded.chain],
        "name": profile.name,
        "path": str(loaded.path),
        "origin": loaded.origin,
        "digest": loaded.digest,
        "paths_root": profile.paths.root,
        "paths_cache": profile.paths.cache,
        "host_python": None if host_python is None else str(host_python),
        "lock": str(loaded.lock_path),
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


def cached_facts(
    ref: str | None,
    *,
    cache: str | Path | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProfileFacts | None:
    """The kept facts of the profile ``ref`` names, or None (none kept, anything that decided
    them changed, or a damaged record: see the module's docstring)."""
    root = _root(cache, environ)
    value = None if root is None else memo.get(root, FACTS_KIND, profile_key(ref, cwd, environ))
    if value is None:
        return None
    try:
        return ProfileFacts(value)
    except (KeyError, TypeError):
        return None
