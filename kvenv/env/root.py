"""The runtime root's layout, owned here and nowhere else.

Every name below is kvenv's; nothing else in a root is touched::

    <root>/.kvenv-root                    ownership marker (a root without it is not kvenv's),
                                          naming the profile it belongs to (RootOwner)
    <root>/.kvenv.lock                    file lock serialising applies (+ .kvenv.lock.owner)
    <root>/current.json                   {"generation": ID, "previous": ID,
                                           "manifest_sha256": HEX}: THE switch
    <root>/activate.sh|.fish|.ps1         activation scripts (written by kvenv.env.activation)
    <root>/generations/<ID>/native/       the native wheel (hard links from the store)
    <root>/generations/<ID>/overlay/      the overlay wheels
    <root>/generations/<ID>/bin/          console scripts, shebang = the host interpreter
    <root>/generations/<ID>/manifest.json written last: a generation without it is incomplete

Why a ``current.json`` pointer replaced with ``os.replace`` and not a ``current`` symlink:
``os.replace`` of a file is atomic on every OS and filesystem kvenv meets (Kaggle datasets and
some mounts do not keep symlinks, Windows needs privileges for them), ``reset`` refuses to
follow symlinks anywhere under the root, and activation resolves the pointer to the
generation's real directories, so a process that activated a generation keeps importing from
it while a later apply switches (that previous generation is kept until the next apply).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvenv._util import jsonio, memo
from kvenv.env.manifest import MANIFEST_NAME, Manifest, Pointer, path_inside, read_manifest
from kvenv.env.rootfiles import GENERATIONS as GENERATIONS
from kvenv.env.rootfiles import POINTER_NAME as POINTER_NAME
from kvenv.env.rootfiles import PathLock, file_sha256, write_marker
from kvenv.env.rootfiles import new_generation_id as new_generation_id
from kvenv.env.rootfiles import now as now
from kvenv.env.shellrender import SHIMS
from kvenv.errors import ConflictError, InputError, IntegrityError, KvenvError, Problem
from kvenv.model import convert, formats
from kvenv.model.locations import LOCK_NAME, ROOT_MARKER, Locations

if TYPE_CHECKING:
    from kvenv.model.loading import LoadedProfile

OWNER_SUFFIX = ".owner"
OWN_NAMES = frozenset({ROOT_MARKER, LOCK_NAME, LOCK_NAME + OWNER_SUFFIX})
# The root's own files kvenv replaces atomically (kvenv._util.atomic writes a temporary
# ``.<name>.<8 random characters>.tmp`` beside the file and renames it over it): a SIGKILL
# between the two leaves that temporary file behind.
ATOMIC_NAMES = frozenset({ROOT_MARKER, POINTER_NAME, *(f"activate.{suffix}" for suffix in SHIMS)})


# -- ownership ---------------------------------------------------------------------------------


@attrs.frozen
class RootOwner:
    """The profile a root belongs to, recorded in its ``.kvenv-root`` marker.

    A profile is what it is, not where it lies: the owner *is* the profile's name. The same
    profile reached any documented way (built-in, ``./profiles/NAME.toml``, a path,
    ``$KVENV_PROFILE``, a bundle's copy, ``kvenv.activate()``, a cluster node) is the same
    owner; a changed profile of that name is still the owner, and its apply makes a new
    generation (a generation's manifest records the content, as the profile's digest). Two
    profiles with different names meeting in one root are refused. ``file`` says where the
    profile was read from when the root was claimed (None: a built-in); it is for messages
    only and takes no part in equality, so a marker written by kvenv 0.1.0 (name and file) is
    adopted as it is."""

    name: str
    file: str | None = attrs.field(default=None, eq=False)

    def describe(self) -> str:
        return f"{self.name!r} ({self.file or 'built-in'})"


def owner_of(loaded: LoadedProfile) -> RootOwner:
    """The identity a root records for ``loaded`` (its name; the file for messages)."""
    if loaded.origin == "builtin":
        return RootOwner(loaded.profile.name)
    return RootOwner(loaded.profile.name, str(loaded.path.resolve()))


def _reset_command(owner: RootOwner, root: Path) -> str:
    """The command that removes ``owner``'s runtime from ``root``: by its file when that still
    exists (a project profile may not be found by name from here), else by name."""
    import shlex

    ref = owner.file if owner.file is not None and os.path.isfile(owner.file) else owner.name
    return shlex.join(["kvenv", "reset", ref, "--root", str(root), "--yes"])


def _conflict_hint(owner: RootOwner, other: RootOwner, root: Path) -> str:
    return (
        f"give {owner.name!r} a root of its own (--root DIR, $KVENV_ROOT, or [paths] root in "
        f"its profile), or first remove the runtime of {other.name!r} from this root: "
        f"`{_reset_command(other, root)}`"
    )


def stray_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file kvenv's atomic writer leaves beside one of the
    root's own files (:data:`ATOMIC_NAMES`) when it is killed before the rename."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    base, _, random = name[1:-4].rpartition(".")
    return len(random) == 8 and base in ATOMIC_NAMES


def remove_stray_temps(root: Path) -> list[str]:
    """Remove the temporary files a killed kvenv left in ``root`` (:func:`stray_temp`); their
    names. Call it holding the root lock: every writer of those files holds it then (a claim
    of an unowned root writes the marker without it: :func:`claim_root` tolerates losing that
    temporary file to an apply that owns the root by then)."""
    removed = []
    try:
        names = [name for name in os.listdir(root) if stray_temp(name)]
    except OSError:
        return []
    for name in names:
        try:
            os.unlink(root / name)
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed


def is_owned(root: Path) -> bool:
    """Whether ``root`` carries kvenv's ownership marker."""
    memo.note("stat", str(root / ROOT_MARKER))  # the recording seam: asked, not read
    return (root / ROOT_MARKER).is_file()


def _read_marker(root: Path) -> dict[str, object]:
    try:
        data = jsonio.loads_json(
            memo.read_bytes(root / ROOT_MARKER).decode("utf-8"), file=f"{root}/{ROOT_MARKER}"
        )
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_owner(root: Path) -> RootOwner | None:
    """The profile ``root`` belongs to; None when its marker names none (an older kvenv)."""
    owner = _read_marker(root).get("owner")
    if not isinstance(owner, dict) or not isinstance(owner.get("name"), str):
        return None
    file = owner.get("file")
    return RootOwner(str(owner["name"]), file if isinstance(file, str) else None)


def _write_marker(root: Path, owner: RootOwner | None, created_at: str | None = None) -> None:
    write_marker(root, None if owner is None else (owner.name, owner.file), created_at)


def foreign_owner(root: Path, owner: RootOwner) -> RootOwner | None:
    """The other profile ``root`` belongs to, or None when it is ``owner``'s or names none
    (a missing marker too: read all the same, so that its absence is noted for the memo)."""
    found = read_owner(root)
    return found if found is not None and found != owner else None


def check_owner(root: Path, owner: RootOwner) -> None:
    """Refuse (:class:`ConflictError`) to read ``root`` for ``owner`` when it belongs to
    another profile: that profile's environment is not this one's."""
    other = foreign_owner(root, owner)
    if other is None:
        return
    raise ConflictError(
        f"the runtime root {root} belongs to profile {other.describe()}, "
        f"not to {owner.describe()}: nothing of {owner.name!r} is applied there",
        hint=_conflict_hint(owner, other, root),
    )


def claim_root(root: Path) -> None:
    """Make ``root`` a kvenv runtime root: create it, or adopt it when empty. A non-empty
    directory without the marker is someone else's and is refused. (Which profile owns it is
    settled under the root lock: :func:`take_ownership`.)"""
    if root.is_symlink() and not root.exists():
        raise ConflictError(f"runtime root is a dangling symlink: {root}")
    if root.exists() and not root.is_dir():
        raise ConflictError(
            f"runtime root is not a directory: {root}", hint="choose another --root"
        )
    if is_owned(root):
        return
    if root.exists():  # a first claim killed mid-write leaves a stray temporary file: ours
        names = (p.name for p in root.iterdir())
        foreign = sorted(n for n in names if n not in OWN_NAMES and not stray_temp(n))
        if foreign:
            shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
            raise ConflictError(
                f"refusing to use non-empty directory {root}: it was not created by kvenv "
                f"(contains {shown})",
                hint="choose an empty or new --root; kvenv never overwrites directories it "
                "does not own",
            )
    root.mkdir(parents=True, exist_ok=True)
    try:
        _write_marker(root, None)  # never over a marker another apply wrote meanwhile
    except FileExistsError:
        return
    except FileNotFoundError:
        if not is_owned(root):
            raise  # not an apply that owns the root by now removing our temporary file


def take_ownership(root: Path, owner: RootOwner) -> None:
    """Record ``owner`` in the marker of a claimed ``root`` (call it holding the root lock).
    A root that belongs to another profile (another name) and holds an applied generation is
    refused (:class:`ConflictError`, naming both profiles and the fix); one without an owner
    (new, or made by an older kvenv) or with nothing applied is taken over. The same name is
    the same owner: its marker is left as it is."""
    found = read_owner(root)
    if found == owner:
        return  # the same profile (by name), wherever it was read from: the marker stays
    if found is not None and (root / POINTER_NAME).exists():
        raise ConflictError(
            f"refusing to apply profile {owner.describe()} in {root}: the root belongs to "
            f"profile {found.describe()}",
            hint=_conflict_hint(owner, found, root),
        )
    created = _read_marker(root).get("created_at")
    _write_marker(root, owner, created if isinstance(created, str) else None)


def unusable_dir_error(exc: OSError, locations: Locations) -> KvenvError | None:
    """The root or cache directory named by ``exc`` (a permission or "not a directory" error)
    as a message that names the path and where it came from, with a fix that fits; None when
    ``exc`` is about neither."""
    if exc.errno not in _UNUSABLE or not exc.filename:
        return None
    where = os.path.abspath(os.fsdecode(exc.filename))
    if exc.errno == errno.EEXIST and os.path.isdir(where):
        return None  # not a file in the way: some other failure, reported as it is
    for what, base, origin, flag in (
        ("runtime root", locations.root, locations.root_from, "--root DIR"),
        ("cache", locations.cache, locations.cache_from, "--cache DIR"),
    ):
        if not (path_inside(where, str(base)) or path_inside(str(base), where)):
            continue  # neither in this directory nor one of its parents
        reason = os.strerror(exc.errno)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            hint = (
                f"make {base} (or its parent) writable for this user, or choose another "
                f"{what} with {flag}"
            )
        else:
            hint = (
                f"a file stands where a directory of {base} must be: choose another {what} "
                f"with {flag}"
            )
        return InputError(
            f"cannot use the {what} {base} (from {origin}): {reason}: {where}", hint=hint
        )
    return None


_UNUSABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST})


# -- the root lock -----------------------------------------------------------------------------


def owner_file(locations: Locations) -> Path:
    """The sidecar naming the holder of the root lock (present while an apply runs)."""
    return locations.lock.with_name(locations.lock.name + OWNER_SUFFIX)


class RootLock(PathLock):
    """``filelock`` on ``<root>/.kvenv.lock``; the holder's pid and host in a sidecar file."""

    def __init__(self, locations: Locations, *, wait: bool, on_wait: Callable[[str], None]):
        super().__init__(locations.lock, owner_file(locations), wait=wait, on_wait=on_wait)


# -- generations -------------------------------------------------------------------------------


def _is_generation_id(name: str) -> bool:
    stamp, _, tail = name.partition("-")
    return len(stamp) == 15 and stamp[8] == "T" and len(tail) == 6 and tail.isalnum()


def generation_dir(root: Path, generation: str) -> Path:
    """The directory of ``generation`` under ``root``."""
    return root / GENERATIONS / generation


def manifest_path(root: Path, generation: str) -> Path:
    """Where the manifest of ``generation`` lives."""
    return generation_dir(root, generation) / MANIFEST_NAME


def list_generations(locations: Locations) -> list[str]:
    """The generation directories of the root, oldest first."""
    base = locations.generations
    memo.note("listing", str(base))
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and _is_generation_id(p.name))


def remove_generations(locations: Locations, keep: set[str], *, incomplete_only: bool) -> list[str]:
    """Remove kvenv's generation directories not in ``keep`` (only those without a manifest
    when ``incomplete_only``). Never follows symlinks, and never removes a generation that
    holds another runtime root (kvenv did not make that part of the generation)."""
    import shutil

    from kvenv.env.placecheck import holds_a_root

    removed: list[str] = []
    for name in list_generations(locations):
        if name in keep:
            continue
        path = generation_dir(locations.root, name)
        if path.is_symlink():
            continue
        if incomplete_only and (path / MANIFEST_NAME).exists():
            continue
        if holds_a_root(path):
            continue
        shutil.rmtree(path)
        removed.append(name)
    return removed


# -- the pointer -------------------------------------------------------------------------------


def read_pointer(root: Path) -> Pointer | None:
    """The current-generation pointer of ``root``, or None when nothing was applied."""
    path = root / POINTER_NAME
    try:
        data = jsonio.loads_json(memo.read_bytes(path).decode("utf-8"), file=str(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read {path}: {exc}",
            hint="start over: `{kvenv reset --yes}`, then `{kvenv apply}`",
        ) from None
    formats.newer_format(
        data, reads_up_to=formats.POINTER_FORMAT, file=str(path), what="generation pointer"
    )
    pointer = convert.structure(
        data, Pointer, file=str(path), what="generation pointer", lenient=True
    )
    if "/" in pointer.generation or pointer.generation.startswith("."):
        raise InputError(
            f"invalid generation pointer: {path}",
            problems=[Problem("not a generation id", file=str(path), path="$.generation")],
        )
    return pointer


def checked_manifest_path(root: Path, pointer: Pointer) -> Path:
    """The manifest ``pointer`` names, after checking its bytes against the digest the pointer
    recorded: an :class:`IntegrityError` naming the file and the fix when they differ (a hand
    edit) or the pointer records none (an older kvenv). A missing manifest is left to its
    reader, which says so."""
    path = manifest_path(root, pointer.generation)
    have = file_sha256(path)
    if have is None or have == pointer.manifest_sha256:
        return path
    if pointer.manifest_sha256 is None:
        why = f"{root / POINTER_NAME} records no manifest digest (written by an older kvenv)"
    else:
        why = (
            f"its sha256 is {have}, the pointer {root / POINTER_NAME} records "
            f"{pointer.manifest_sha256}: it was edited after kvenv wrote it"
        )
    raise IntegrityError(
        f"the current manifest cannot be trusted: {path}: {why}",
        hint="rebuild it: `{kvenv apply --repair}` (a fresh generation); activation never "
        "reads an unverified manifest",
    )


def check_manifest_file(path: Path) -> None:
    """A manifest named explicitly (``--manifest``, ``$KVENV_MANIFEST``) that is the current
    manifest of a kvenv root is checked against that root's pointer like any reader's; other
    files (an older generation, a copy) have no digest to check against."""
    generation = path.parent
    if path.name != MANIFEST_NAME or generation.parent.name != GENERATIONS:
        return
    root = generation.parent.parent
    if not is_owned(root):
        return
    pointer = read_pointer(root)
    if pointer is not None and pointer.generation == generation.name:
        checked_manifest_path(root, pointer)


def current_manifest_path(root: Path) -> Path | None:
    """The manifest file of the current generation, checked against the pointer's digest,
    or None when nothing was applied."""
    pointer = read_pointer(root)
    if pointer is None:
        return None
    return checked_manifest_path(root, pointer)


def current_manifest(root: Path) -> Manifest | None:
    """The manifest of the current generation of ``root``, or None when nothing was applied."""
    path = current_manifest_path(root)
    if path is None:
        return None
    return read_manifest(path, root=root)


def current_state(locations: Locations) -> tuple[Pointer | None, Manifest | None]:
    """The pointer and the current manifest of the root (both None when nothing is applied);
    the manifest is checked against the pointer's digest."""
    pointer = read_pointer(locations.root)
    if pointer is None:
        return None, None
    path = checked_manifest_path(locations.root, pointer)
    return pointer, read_manifest(path, root=locations.root)


def dirs_present(manifest: Manifest) -> bool:
    """Whether the generation's native, overlay and bin directories all exist."""
    dirs = manifest.dirs
    for d in (dirs.native, dirs.overlay, dirs.bin):
        memo.note("isdir", d)
    return all(os.path.isdir(d) for d in (dirs.native, dirs.overlay, dirs.bin))
