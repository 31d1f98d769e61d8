"""Every file an apply needs, with its pinned identity: the native wheel and the overlay wheels.

:func:`artifacts_for` turns a loaded profile and its PEP 751 lock into :class:`Artifact`
records (pure: it reads no file except a lock given as a path). Which wheel of a locked package
is chosen for the target is decided by ``packaging.pylock.Pylock.select`` with the target's
marker environment and ordered tag list from :class:`kvenv.model.target.TargetEnv` (never the
machine kvenv runs on), so the best-ranked compatible wheel wins, as an installer running on
the target would pick it. Locks are read and validated by ``kvenv.lock`` (``read_lock``).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

import attrs
from packaging.markers import Environment
from packaging.pylock import PackageWheel, Pylock, PylockSelectError
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from kvenv._util.versions import same_version
from kvenv.errors import ConflictError, IntegrityError, LockError, Problem, ProfileError
from kvenv.lock.pylock import LockFile, is_native_package, parse_lock, read_lock
from kvenv.model.loading import LoadedProfile
from kvenv.model.profile import HfSource, IndexSource, PathSource, UrlSource
from kvenv.model.target import TargetEnv

Role = Literal["native", "overlay"]
# A profile source, an absolute local path, or a remote URL taken from the lock.
ArtifactSource = HfSource | UrlSource | IndexSource | Path | str


@attrs.frozen
class Artifact:
    """One pinned file: what it is, which bytes exactly, and where to get them.

    ``filename`` is None only for an index source that does not name its file; the fetcher
    then finds it on the index by name, version and sha256. ``index_fallback`` marks an
    overlay wheel the lock gives by ``path`` only (a portable lock): when that file does not
    exist, the fetcher finds it on the configured index by project name and exact file name.
    """

    name: str
    version: str
    filename: str | None
    sha256: str
    size: int | None
    role: Role
    source: ArtifactSource
    index_fallback: bool = False
    declared_in: str | None = None  # the profile file that pins a native wheel

    @property
    def label(self) -> str:
        """How messages name this artifact."""
        return self.filename or f"{self.name}=={self.version}"


def artifacts_for(
    loaded: LoadedProfile, lock_data: LockFile | Pylock | Mapping[str, Any] | Path | None
) -> list[Artifact]:
    """The native wheel (first) and every overlay wheel the lock selects for the target.

    ``lock_data`` is a :class:`kvenv.lock.LockFile` (from ``read_lock``), a validated
    :class:`Pylock`, the lock's TOML as a mapping, a path to the lock file, or None for a
    profile without overlay. Wheel ``path`` entries resolve against the lock's directory
    (normalised, so ``../wheels/x.whl`` names ``<project>/wheels/x.whl``).
    Raises :class:`LockError` for a lock kvenv cannot use and :class:`ConflictError` when it
    pins a protected package.
    """
    profile = loaded.profile
    result: list[Artifact] = []
    native = native_artifact(loaded)
    if native is not None:
        result.append(native)
    if lock_data is None:
        return result
    lock_path = lock_data if isinstance(lock_data, Path) else loaded.lock_path
    if isinstance(lock_data, LockFile):
        lock_path = lock_data.path
    lock_file, lock_dir = str(lock_path), lock_path.absolute().parent
    lock = _as_pylock(lock_data, lock_file)
    if profile.target is None:
        raise ProfileError(
            f"profile {profile.name!r} has no [target]; the lock cannot be selected for it",
            problems=[Problem("missing", file=str(loaded.path), path="$.target")],
        )
    protected = {canonicalize_name(n) for n in profile.host.protected}
    target = TargetEnv.from_profile_target(profile.target, file=str(loaded.path))
    environment, tags = target.markers(), target.tags()
    for package, wheel in _select(lock, environment, tags, lock_file):
        name = canonicalize_name(package.name)
        where = f"$.packages[{_position(lock, package)}]"
        if is_native_package(package):  # the native is the profile's: never an overlay wheel
            _check_native_entry(package, wheel, native, lock_file, where)
            continue
        if name in protected:
            raise ConflictError(
                f"the lock pins {package.name!r}, which is protected on the host",
                problems=[Problem("protected package in the lock", file=lock_file, path=where)],
                hint="re-lock with `kvenv lock`; protected packages come from the host only",
            )
        if not isinstance(wheel, PackageWheel):
            raise LockError(
                f"{package.name!r} is locked as a {type(wheel).__name__}, not a wheel",
                problems=[
                    Problem(
                        "kvenv installs wheels only (no sdists, archives, directories or VCS)",
                        file=lock_file,
                        path=where,
                        fix="lock a wheel for this package",
                    )
                ],
            )
        artifact = _overlay_artifact(package.name, package.version, wheel, lock_dir)
        if artifact is None:
            raise LockError(
                f"{package.name!r} has no sha256 in the lock",
                problems=[
                    Problem(
                        "every wheel needs a sha256 hash",
                        file=lock_file,
                        path=f"{where}.wheels",
                        fix="re-lock with `kvenv lock`",
                    )
                ],
            )
        if native is not None and name == canonicalize_name(native.name):
            if artifact.sha256 != native.sha256:
                raise LockError(
                    f"the lock pins {package.name} with sha256 {artifact.sha256}; the profile "
                    f"pins {native.sha256}",
                    problems=[Problem("differs from native.sha256", file=lock_file, path=where)],
                    hint="re-lock with `kvenv lock` after changing the native wheel",
                )
            continue
        result.append(artifact)
    return result


def _check_native_entry(
    package: Any, wheel: Any, native: Artifact | None, lock_file: str, where: str
) -> None:
    """The lock's native package must be the profile's native wheel (name and sha256)."""
    sha = wheel.hashes.get("sha256") if isinstance(wheel, PackageWheel) else None
    fix = "re-lock with `kvenv lock` after changing the native wheel (or undo the lock's edit)"
    if native is None or canonicalize_name(package.name) != canonicalize_name(native.name):
        pinned = f"{native.name} (sha256 {native.sha256})" if native else "no native wheel"
        raise LockError(
            f"the lock's native wheel {package.name} is not the profile's: the profile pins "
            f"{pinned}",
            problems=[Problem("differs from the profile's [native]", file=lock_file, path=where)],
            hint=fix,
        )
    if sha != native.sha256:  # quote the lock's own value: the one that is wrong
        raise LockError(
            f"the lock's native wheel {package.name} has sha256 {sha or '(none)'}; the profile "
            f"pins {native.sha256}",
            problems=[
                Problem(
                    f"is {sha or '(none)'}, not the profile's native.sha256 {native.sha256}",
                    file=lock_file,
                    path=f"{where}.wheels[{_wheel_index(package, wheel)}].hashes.sha256",
                )
            ],
            hint=fix,
        )


def _wheel_index(package: Any, wheel: Any) -> int:
    """The position of ``wheel`` among ``package``'s wheels (0 when it is not found)."""
    wheels = list(getattr(package, "wheels", None) or ())
    return next((i for i, w in enumerate(wheels) if w is wheel), 0)


def native_artifact(loaded: LoadedProfile) -> Artifact | None:
    """The profile's native wheel as an artifact, or None when the profile has none."""
    native = loaded.profile.native
    if native is None:
        return None
    source = native.source
    filename: str | None
    resolved: ArtifactSource
    if isinstance(source, HfSource):
        filename, resolved = source.filename, source
    elif isinstance(source, UrlSource):
        filename, resolved = url_filename(source.url), source
    elif isinstance(source, PathSource):
        path = loaded.resolve(source.path).absolute()
        filename, resolved = path.name, path
    else:
        filename, resolved = source.filename, source
    artifact = Artifact(
        name=native.name,
        version=native.version,
        filename=filename,
        sha256=native.sha256,
        size=native.size,
        role="native",
        source=resolved,
        declared_in=str(loaded.path),
    )
    if filename is not None:
        check_identity(artifact, *_filename_identity(filename, artifact), seen_in=filename)
    return artifact


def _filename_identity(filename: str, artifact: Artifact) -> tuple[str, str]:
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise ProfileError(
            f"the native wheel's file name {filename!r} is not a wheel file name",
            problems=[Problem(str(exc), file=artifact.declared_in, path="$.native.source")],
        ) from None
    return str(name), str(version)


def check_identity(artifact: Artifact, name: str, version: str, *, seen_in: str) -> None:
    """Refuse a native wheel whose name or version (from its file name, or its METADATA)
    is not the profile's ``native.name``/``native.version``."""
    problems = []
    if canonicalize_name(name) != canonicalize_name(artifact.name):
        problems.append(
            Problem(
                f"the profile declares {artifact.name!r}, but {seen_in} is {name!r}",
                file=artifact.declared_in,
                path="$.native.name",
                fix=f"set native.name to {name!r}, or pin the wheel you meant",
            )
        )
    if not same_version(version, artifact.version):
        problems.append(
            Problem(
                f"the profile declares version {artifact.version}, but {seen_in} is {version}",
                file=artifact.declared_in,
                path="$.native.version",
                fix=f"set native.version to {version!r}, or pin the wheel you meant",
            )
        )
    if problems:
        raise ProfileError(
            "the native wheel is not the one the profile declares", problems=problems
        )


def verify_wheel_identity(artifact: Artifact, path: Path) -> None:
    """Hold a fetched native wheel's METADATA ``Name``/``Version`` against the profile."""
    import zipfile
    from email.parser import HeaderParser

    label = f"the METADATA of {artifact.label}"
    try:
        with zipfile.ZipFile(path) as archive:
            names = [
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            ]
            if len(names) != 1:
                raise IntegrityError(f"{artifact.label} has no single .dist-info/METADATA")
            text = archive.read(names[0]).decode("utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise IntegrityError(f"{artifact.label} is not a readable wheel: {exc}") from None
    headers = HeaderParser().parsestr(text)
    check_identity(
        artifact, str(headers.get("Name", "")), str(headers.get("Version", "")), seen_in=label
    )


def url_filename(url: str) -> str:
    """The decoded last path segment of a URL (``%2B`` becomes ``+``)."""
    return unquote(posixpath.basename(urlsplit(url).path))


def read_pylock(path: Path) -> Pylock:
    """Read and validate a kvenv lock file (PEP 751 with ``[tool.kvenv]``)."""
    return read_lock(path).pylock


def _as_pylock(data: LockFile | Pylock | Mapping[str, Any] | Path, file: str) -> Pylock:
    if isinstance(data, LockFile):
        return data.pylock
    if isinstance(data, Pylock):
        return data
    if isinstance(data, Path):
        return read_pylock(data)
    return parse_lock(data, file=file)[0]


def _select(
    lock: Pylock, environment: Mapping[str, object], tags: Sequence[Tag], file: str
) -> Iterator[tuple[Any, Any]]:
    try:
        yield from lock.select(environment=cast(Environment, environment), tags=tags)
    except PylockSelectError as exc:
        raise LockError(
            f"the lock has no install for this profile's target: {file}",
            problems=[Problem(str(exc), file=file, path="$.packages", fix="re-lock")],
        ) from None


def _position(lock: Pylock, package: Any) -> int:
    for index, candidate in enumerate(lock.packages):
        if candidate is package:
            return index
    return -1


def _overlay_artifact(
    name: str, version: Any, wheel: PackageWheel, lock_dir: Path
) -> Artifact | None:
    sha = wheel.hashes.get("sha256")
    if not sha:
        return None
    filename = wheel.filename
    if version is None:
        version = parse_wheel_filename(filename)[1]
    source: ArtifactSource = wheel.url or Path(os.path.normpath(lock_dir / str(wheel.path)))
    return Artifact(
        index_fallback=wheel.url is None,
        name=name,
        version=str(version),
        filename=filename,
        sha256=sha.lower(),
        size=wheel.size,
        role="overlay",
        source=source,
    )
