"""The applied state of a runtime root as plain data, for the start-up paths (issue 13).

:mod:`kvenv.env.root` reads the pointer and the manifest into attrs records through cattrs;
importing and running that costs more than ``kvenv activate``'s whole budget. This module
reads the same files with ``json`` alone and imports nothing heavier (no ``typing``, and
sha256 without OpenSSL: :mod:`kvenv._util.smallhash`). It never
raises for a bad state: it answers None ("unsure"), and the caller takes the full path
(:func:`kvenv.env.root.current_state`), which reports the problem exactly as before.

The API, for ``activate``, ``run``, ``shell`` and the no-op ``apply``:

- :func:`read_current` ``(root, cache) -> PlainState | None``: the current generation of
  ``root``, its manifest checked against the pointer's sha256 on every call (the same check
  as :func:`kvenv.env.root.checked_manifest_path`, on the very bytes that are then parsed),
  its runtime paths inside the root, and the manifest's full validation (cattrs structure and
  :func:`kvenv.env.manifest.check_manifest`) *remembered*: a manifest is used only when the
  full reader accepted these exact bytes for this root before (:func:`vouch`, a record under
  the cache keyed by the bytes' sha256, the root and kvenv's manifest code). None when
  nothing is applied, anything differs, or no such record exists.
- :func:`vouch` ``(root, cache, manifest_path)``: called by a full path after
  :func:`kvenv.env.manifest.read_manifest` accepted the current manifest for ``root``;
  best effort, never raises.
- :func:`owned_by_other` ``(root, owner) -> bool``: whether ``root``'s marker names another
  profile than ``owner`` (``(name, file)``, as :attr:`kvenv.model.facts.ProfileFacts.owner`
  gives it): another name, exactly :func:`kvenv.env.root.foreign_owner`'s rule (the file
  says where the profile was read from and takes no part).
- :func:`apply_in_progress` ``(root) -> bool``: the root lock's owner sidecar exists.
- :func:`ready` ``(state) -> bool``: the checks activation makes every time (its dirs exist,
  no protected package in them), as a yes or no.

:class:`PlainState` carries the pointer (``generation``, ``previous``, ``manifest_sha256``),
``manifest_path`` and the manifest's raw JSON (``data``) with typed accessors for what the
start-up paths use; :class:`PlainActivation` has the attributes of
:class:`kvenv.env.manifest.Activation`, so :mod:`kvenv.env.shellrender` renders either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kvenv._util import jsonio
from kvenv._util.identity import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:  # the start-up path imports no ``typing``
    from collections.abc import Iterable
    from typing import Any

# The same names as kvenv.env.root / kvenv.model.places (which import more than this needs);
# tests/unit/env/test_plainstate.py checks they agree.
_POINTER = "current.json"
_GENERATIONS = "generations"
_MANIFEST = "manifest.json"
_MARKER = ".kvenv-root"
_LOCK_OWNER = ".kvenv.lock.owner"
VERDICTS_DIR = "manifest-verdicts-v1"
_KEEP = 64  # verdicts kept; the oldest go when more are written
_POINTER_KEYS = frozenset({"schema", "generation", "previous", "manifest_sha256"})
# The modules whose rules decide whether a manifest is valid: a different kvenv never reuses
# another's verdict.
_CODE = ("__init__.py", "env/manifest.py", "env/plainstate.py", "model/convert.py",
         "model/fields.py")  # fmt: skip


class PlainActivation:
    """The manifest's ``activation``, as plain lists and a dict (the attributes of
    :class:`kvenv.env.manifest.Activation`)."""

    __slots__ = ("env", "ld_library_path", "path", "pth_imports", "pythonpath", "site_dirs")

    def __init__(self, data: dict[str, Any]) -> None:
        self.pythonpath: list[str] = list(data.get("pythonpath", []))
        self.path: list[str] = list(data.get("path", []))
        self.ld_library_path: list[str] = list(data.get("ld_library_path", []))
        self.env: dict[str, str] = dict(data.get("env", {}))
        self.pth_imports: list[str] = list(data.get("pth_imports", []))
        self.site_dirs: list[str] = list(data.get("site_dirs", []))


class PlainState:
    """The current generation of a root: the pointer, the manifest's path and its JSON."""

    __slots__ = ("activation", "data", "generation", "manifest_path", "manifest_sha256",
                 "previous", "root")  # fmt: skip

    def __init__(
        self,
        root: Path,
        pointer: dict[str, Any],
        manifest_path: Path,
        data: dict[str, Any],
    ) -> None:
        self.root = root
        self.generation: str = pointer["generation"]
        self.previous: str | None = pointer.get("previous")
        self.manifest_sha256: str = pointer["manifest_sha256"]
        self.manifest_path = manifest_path
        self.data = data
        self.activation = PlainActivation(data["activation"])

    @property
    def kvenv_version(self) -> str:
        return str(self.data["kvenv_version"])

    @property
    def profile_name(self) -> str:
        return str(self.data["profile"]["name"])

    @property
    def profile_digest(self) -> str:
        return str(self.data["profile"]["digest"])

    @property
    def lock_digest(self) -> str | None:
        value = self.data["lock_digest"]
        return None if value is None else str(value)

    @property
    def native_sha256(self) -> str | None:
        native = self.data["native"]
        return None if native is None else str(native["sha256"])

    @property
    def python(self) -> str | None:
        value = self.data.get("python")
        return None if value is None else str(value)

    @property
    def dirs(self) -> dict[str, str]:
        """``generation``, ``native``, ``overlay``, ``bin`` (absolute, inside the root)."""
        return {k: str(v) for k, v in self.data["dirs"].items()}

    @property
    def protected(self) -> list[str]:
        return [str(p) for p in self.data.get("protected", [])]

    def matches(self, profile_digest: str, lock_digest: str | None, native_sha: str | None) -> bool:
        """:meth:`kvenv.env.manifest.Manifest.matches`, over the plain data."""
        return (
            self.profile_digest == profile_digest
            and self.lock_digest == lock_digest
            and self.native_sha256 == native_sha
        )


# -- the owner marker ----------------------------------------------------------------------


def owned_by_other(root: Path, owner: tuple[str, str | None]) -> bool:
    """Whether ``root``'s marker names a profile other than ``owner`` (name, resolved file or
    None for a built-in), as :func:`kvenv.env.root.foreign_owner` decides: by name alone (a
    profile is what it is, not where it was read from); a root without a marker, or whose
    marker names no owner, is nobody's."""
    marker = root / _MARKER
    if not marker.is_file():
        return False
    try:
        data = jsonio.loads_json(marker.read_text(encoding="utf-8"), file=str(marker))
    except (OSError, ValueError):
        return False
    found = data.get("owner") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not isinstance(found.get("name"), str):
        return False
    return bool(found["name"] != owner[0])


def apply_in_progress(root: Path) -> bool:
    """Whether an apply holds ``root``'s lock now (its owner sidecar exists)."""
    return (root / _LOCK_OWNER).exists()


def shadowing_entry(dirs: Iterable[Path], protected: Iterable[str]) -> Path | None:
    """The first entry of ``dirs`` whose import name is one of the ``protected``
    distributions' (activation refuses it: :func:`kvenv.env.activation.check_not_shadowing`),
    or None."""
    from kvenv._util.importnames import import_name_of, protected_import_names

    names = protected_import_names(protected)
    for directory in dirs:
        if not directory.is_dir():
            continue
        for child in directory.iterdir():
            if import_name_of(child.name) in names:
                return child
    return None


def ready(state: PlainState) -> bool:
    """Whether activating ``state`` would pass :func:`kvenv.env.activation.activation_for`'s
    checks: its overlay and native dirs exist and hold no protected package."""
    dirs = state.dirs
    overlay, native = dirs.get("overlay", ""), dirs.get("native", "")
    if not (os.path.isdir(overlay) and os.path.isdir(native)):
        return False
    try:
        return shadowing_entry((Path(overlay), Path(native)), state.protected) is None
    except OSError:
        return False


# -- the pointer and the manifest ------------------------------------------------------------


def _pointer(root: Path) -> dict[str, Any] | None:
    try:
        data = jsonio.loads_json(
            (root / _POINTER).read_bytes().decode("utf-8"), file=f"{root}/{_POINTER}"
        )
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not set(data) <= _POINTER_KEYS:
        return None
    schema, generation = data.get("schema"), data.get("generation")
    previous, digest = data.get("previous"), data.get("manifest_sha256")
    if type(schema) is not int or schema != 1 or not isinstance(generation, str):
        return None
    if "/" in generation or generation.startswith(".") or not generation:
        return None
    if not (previous is None or isinstance(previous, str)) or not isinstance(digest, str):
        return None
    return data


def _inside(path: object, root: str) -> bool:
    if not isinstance(path, str) or not os.path.isabs(path) or ".." in Path(path).parts:
        return False
    norm, base = os.path.normpath(path), os.path.normpath(root)
    return norm == base or norm.startswith(base.rstrip(os.sep) + os.sep)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def manifest_usable(data: object, root: Path, generation: str) -> bool:
    """Whether ``data`` (a manifest's JSON) has what the start-up paths read, with its runtime
    paths inside ``root`` (:mod:`kvenv.env.recall` checks a rebased manifest with it)."""
    return _usable(data, root, generation)


def _usable(data: object, root: Path, generation: str) -> bool:
    """The manifest's fields the start-up paths read have the types they need, and its runtime
    paths are inside ``root`` (checked every time, though a verdict vouches for them too)."""
    if not isinstance(data, dict):
        return False
    dirs, activation = data.get("dirs"), data.get("activation")
    profile, native = data.get("profile"), data.get("native")
    if not isinstance(dirs, dict) or not isinstance(activation, dict):
        return False
    if not isinstance(profile, dict) or not (native is None or isinstance(native, dict)):
        return False
    base = str(root)
    if not _inside(data.get("root"), base) or os.path.normpath(data["root"]) != os.path.normpath(
        base
    ):
        return False
    if dirs.get("generation") != generation:
        return False
    if not all(_inside(dirs.get(k), base) for k in ("native", "overlay", "bin")):
        return False
    for key in ("pythonpath", "path", "site_dirs"):
        entries = activation.get(key, [])
        if not _strings(entries) or not all(_inside(e, base) for e in entries):
            return False
    libraries = activation.get("ld_library_path", [])
    if not _strings(libraries) or not all(os.path.isabs(e) for e in libraries):
        return False
    env = activation.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        return False
    return _strings(activation.get("pth_imports", [])) and _strings(data.get("protected", []))


def _code_identity() -> list[list[Any]]:
    from kvenv._util.identity import archive_stamp

    archive = archive_stamp()
    if archive is not None:  # a single-file bundle: the archive stands for its modules
        return [archive]
    package = Path(__file__).resolve().parent.parent
    found: list[list[Any]] = []
    for name in _CODE:
        try:
            st = os.stat(package / name)
        except OSError:
            found.append([name, None])
            continue
        found.append([name, st.st_size, st.st_mtime_ns, st.st_ino])
    return found


def _verdict(cache: Path, manifest_sha256: str, root: Path) -> Path:
    key = json.dumps([manifest_sha256, os.path.normpath(str(root)), _code_identity()])
    return cache / VERDICTS_DIR / f"{sha256_hex(key.encode())[:40]}.ok"


def read_current(root: Path, cache: Path) -> PlainState | None:
    """The current generation of ``root`` as plain data, or None: nothing applied, the
    pointer or manifest unreadable or unexpected, the manifest's bytes not the ones the
    pointer's sha256 names, or no :func:`vouch` record for them (see the module docstring)."""
    pointer = _pointer(root)
    if pointer is None:
        return None
    path = root / _GENERATIONS / pointer["generation"] / _MANIFEST
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if sha256_hex(raw) != pointer["manifest_sha256"]:
        return None
    if not _verdict(cache, pointer["manifest_sha256"], root).is_file():
        return None
    try:
        data = jsonio.loads_json(raw.decode("utf-8"), file=str(path))
    except ValueError:
        return None
    if not _usable(data, root, pointer["generation"]):
        return None
    return PlainState(root, pointer, path, data)


def vouch(root: Path, cache: Path, manifest_path: Path) -> None:
    """Record that the full reader accepted the manifest at ``manifest_path`` (its bytes now)
    as the current manifest of ``root``, so :func:`read_current` may use those bytes. Call it
    only after :func:`kvenv.env.manifest.read_manifest` with ``root`` succeeded. Best effort."""
    try:
        digest = sha256_hex(manifest_path.read_bytes())
        target = _verdict(cache, digest, root)
        if target.is_file():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        from kvenv._util.atomic import write_bytes

        write_bytes(target, b"", durable=False)
        entries = sorted(target.parent.glob("*.ok"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-_KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        return
