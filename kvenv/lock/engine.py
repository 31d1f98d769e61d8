"""``kvenv lock``: profile + host snapshot + sources in, a pylock document out.

The profile's ``[overlay] requires`` and ``constraints`` are always resolved. Inputs recorded
in an existing lock are reused (``fresh`` ignores them): its package versions are preferences
(``upgrade`` drops them all, ``upgrade_packages`` those it names), the one-off requirements and
constraints given earlier with ``--require``/``-c`` stay and new ones add to them, and its
native requirements serve when the native wheel's source is unreachable.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from kvenv.errors import ConflictError, InputError, KvenvError, LockError, UsageError
from kvenv.lock.cache import IndexCache
from kvenv.lock.candidates import Universe
from kvenv.lock.contents import (
    PROTECTED_FIX,
    WheelAtHand,
    protected_entries,
    protected_message,
    sized_file,
)
from kvenv.lock.finder import Finder, WheelFile
from kvenv.lock.native import NativeRequires, native_requires
from kvenv.lock.provider import NativeWheel, constraint_map
from kvenv.lock.pylock import (
    WHEELHOUSE,
    AssumptionEntry,
    KvenvTable,
    LinkedObject,
    LockFile,
    NativeEntry,
    ShadowEntry,
    WaiverEntry,
    build_lock,
    dumps_lock,
    hub_resolve_url,
    read_lock,
    same_lock,
)
from kvenv.lock.reqfile import parse_requirements, read_requirements
from kvenv.lock.resolve import LockedPackage, LockRequest, Resolution, RootRequirement, resolve
from kvenv.lock.sources import IndexConfig
from kvenv.lock.upgrade import (
    Asked,
    check_in_resolution,
    check_versions_exist,
    parse_upgrade_package,
    read_preferences,
)
from kvenv.model.loading import LoadedProfile, recorded_host
from kvenv.model.locations import default_cache_dir
from kvenv.model.profile import HfSource, IndexSource, PathSource, UrlSource
from kvenv.model.snapshot import HostSnapshot, snapshot_digest
from kvenv.model.target import TargetEnv

# Locks kvenv writes are portable unless asked otherwise (docs/locks.md says why).
DEFAULT_PORTABLE = True


@attrs.frozen
class LockOptions:
    index: IndexConfig = attrs.field(factory=IndexConfig)
    output: Path | None = None
    native_requires: Path | None = None
    require: tuple[Path, ...] = ()
    prefer: tuple[Path, ...] = ()
    constraint: tuple[Path, ...] = ()
    exclude_newer: datetime | None = None
    offline: bool = False
    refresh: bool = False
    fresh: bool = False
    # --upgrade: no version kept from the existing lock; --upgrade-package NAME[==VERSION]
    upgrade: bool = False
    upgrade_packages: tuple[str, ...] = ()
    cache_dir: Path | None = None
    portable: bool | None = None  # None: as the existing lock recorded, else DEFAULT_PORTABLE
    # where a wheel not in a wheelhouse may already be on this machine (the artifact cache)
    wheel_at_hand: WheelAtHand | None = None


@attrs.frozen
class LockResult:
    path: Path
    text: str
    resolution: Resolution
    target: TargetEnv
    native_from: str
    changed: bool
    portable: bool = False
    old: str | None = None  # the lock file's text before (None: there was none)
    kept: tuple[str, ...] = ()  # one-off inputs kept from the existing lock, as lines


def parse_exclude_newer(value: str) -> datetime:
    """An RFC 3339 timestamp or a date (midnight UTC)."""
    text = value.strip().replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--exclude-newer: not a date or timestamp: {value!r}",
            hint="use 2026-08-01 or 2026-08-01T12:00:00Z",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _previous(path: Path, fresh: bool) -> LockFile | None:
    if fresh or not path.is_file():
        return None
    try:
        return read_lock(path)
    except LockError:
        return None


def portable_choice(options: LockOptions, previous: LockFile | None) -> bool:
    """``--portable``/``--no-portable`` when given, else what the existing lock recorded."""
    if options.portable is not None:
        return options.portable
    if previous is not None:
        return previous.kvenv.portable
    return DEFAULT_PORTABLE


def _files(paths: Sequence[Path]) -> list[Requirement]:
    out: list[Requirement] = []
    for path in paths:
        out.extend(read_requirements(path))
    return out


def _target(loaded: LoadedProfile) -> TargetEnv:
    profile = loaded.profile
    if profile.target is None:
        raise InputError(
            f"profile {profile.name} has no [target]", hint="add a [target] table to the profile"
        )
    return TargetEnv.from_profile_target(profile.target, file=str(loaded.path))


def asked(options: LockOptions) -> list[Asked]:
    """The versions and names ``--prefer`` and ``--upgrade-package`` ask for, checked."""
    return [
        *read_preferences(options.prefer),
        *(parse_upgrade_package(v) for v in options.upgrade_packages),
    ]


def preferences(options: LockOptions, previous: LockFile | None) -> dict[NormalizedName, Version]:
    """The versions to try first: the existing lock's (none with ``upgrade``; not those
    ``upgrade_packages`` names), then ``--prefer``'s and ``--upgrade-package``'s (these win)."""
    prefer: dict[NormalizedName, Version] = {}
    upgrading = {a.name for a in map(parse_upgrade_package, options.upgrade_packages)}
    if previous is not None and not options.upgrade:
        prefer.update(
            {
                p.name: p.version
                for p in previous.pylock.packages
                if p.version is not None and canonicalize_name(p.name) not in upgrading
            }
        )
    prefer.update({a.name: a.version for a in asked(options) if a.version is not None})
    return prefer


def one_offs(
    options: LockOptions, previous: LockFile | None
) -> tuple[list[str], list[str], list[str]]:
    """The one-off requirements and constraints (``--require``, ``-c``): those the existing
    lock recorded (unless ``fresh``), then the files given now; and which lines were kept from
    the lock (said in the report, so nothing stays without the user seeing it)."""
    kept_requires = list(previous.kvenv.requires) if previous is not None else []
    kept_constraints = list(previous.kvenv.constraints) if previous is not None else []
    requires = [*kept_requires, *(str(r) for r in _files(options.require))]
    constraints = [*kept_constraints, *(str(r) for r in _files(options.constraint))]
    kept = [f"--require {t}" for t in kept_requires] + [f"-c {t}" for t in kept_constraints]
    return list(dict.fromkeys(requires)), list(dict.fromkeys(constraints)), kept


def build_request(
    loaded: LoadedProfile,
    options: LockOptions,
    *,
    native: NativeRequires,
    host: HostSnapshot | None,
    previous: LockFile | None,
    prefer: Mapping[NormalizedName, Version],
) -> tuple[LockRequest, list[str], list[str]]:
    """The resolution request, the extra root lines and the constraint lines."""
    profile = loaded.profile
    assert profile.native is not None
    target = _target(loaded)
    extra, constraint_lines, _ = one_offs(options, previous)
    declared = [RootRequirement(t, "[overlay] requires") for t in profile.overlay.requires]
    roots = [*declared, *(RootRequirement(t, "--require") for t in extra)]
    exact = [
        f"{a.name}=={a.version}"
        for a in map(parse_upgrade_package, options.upgrade_packages)
        if a.version is not None
    ]
    constraints = constraint_map(
        parse_requirements(
            "\n".join([*profile.overlay.constraints, *constraint_lines, *exact]),
            file="constraints",
        )
    )
    request = LockRequest(
        target=target,
        native=NativeWheel(
            canonicalize_name(profile.native.name),
            Version(profile.native.version),
            native.requires,
        ),
        host=host,
        protected=tuple(profile.host.protected),
        waivers={w.name: w.reason for w in profile.host.waivers},
        roots=tuple(roots),
        prefer=dict(prefer),
        constraints=constraints,
    )
    return request, sorted(set(extra)), sorted(set(constraint_lines))


def lock_profile(
    loaded: LoadedProfile,
    options: LockOptions,
) -> LockResult:
    """Resolve and render the lock of ``loaded`` (does not write it)."""
    from kvenv.lock.universe import IndexUniverse

    path = options.output or loaded.lock_path
    previous = _previous(loaded.lock_path, options.fresh)
    host = recorded_host(loaded, must_exist=True).snapshot
    if options.exclude_newer is None and previous is not None and previous.kvenv.exclude_newer:
        options = attrs.evolve(
            options, exclude_newer=parse_exclude_newer(previous.kvenv.exclude_newer)
        )
    cache = IndexCache(options.cache_dir or default_cache_dir())
    target = _target(loaded)
    finder = Finder(
        options.index,
        target,
        cache,
        offline=options.offline,
        refresh=options.refresh,
        exclude_newer=options.exclude_newer,
    )
    prefer = preferences(options, previous)
    with IndexUniverse(finder, prefer=dict(prefer)) as universe:
        native = native_requires(
            loaded,
            requires_file=options.native_requires,
            previous=previous,
            finder=finder,
            offline=options.offline,
        )
        # --native-requires stands in for reading a remote native wheel: it is not read for
        # its linkage either (a local one is; else the previous lock's record is kept)
        no_remote = options.offline or options.native_requires is not None
        native = attrs.evolve(
            native, linkage=_checked_linkage(loaded, host, previous, finder, no_remote)
        )
        native_wheel = _native_index_wheel(loaded, finder)
        text, resolution = _lock(
            loaded,
            universe,
            options,
            native=native,
            host=host,
            previous=previous,
            prefer=prefer,
            native_wheel=native_wheel,
        )
    old = path.read_text(encoding="utf-8") if path.is_file() else None
    portable = portable_choice(options, previous)
    if old is not None and same_lock(old, text):
        text = old  # written by another kvenv, saying the same: left as it is
    kept = tuple(one_offs(options, previous)[2])
    return LockResult(
        path, text, resolution, target, native.source, old != text, portable, old, kept
    )


def _checked_linkage(
    loaded: LoadedProfile,
    host: HostSnapshot | None,
    previous: LockFile | None,
    finder: Finder,
    offline: bool,
) -> tuple[LinkedObject, ...] | None:
    """What the native wheel links (read from its ELF headers), refused with
    :class:`ConflictError` before any resolution when it needs a CUDA newer than the target's
    (:mod:`kvenv.probe.linkage`); what it needs of the host is checked after resolution
    (:func:`_linkage_against_overlay`), once the overlay is known."""
    from kvenv.lock.linkage import native_linkage

    found = native_linkage(loaded, previous=previous, finder=finder, offline=offline)
    if found is None:
        return None
    _refuse_linkage(loaded, tuple(found), host, (), only_cuda=True)
    return tuple(found)


def _refuse_linkage(
    loaded: LoadedProfile,
    found: tuple[LinkedObject, ...],
    host: HostSnapshot | None,
    overlay: Sequence[str],
    *,
    only_cuda: bool = False,
) -> None:
    from kvenv.probe.linkage import CUDA_CHECK, SharedObject, check_linkage

    profile = loaded.profile
    assert profile.native is not None
    findings = check_linkage(
        [SharedObject(o.path, tuple(o.needed), o.soname) for o in found],
        native=f"{profile.native.name} {profile.native.version}",
        target=profile.target,
        host=host,
        declared=profile.native.provided_libs or (),
        overlay=overlay,
    )
    errors = [
        f for f in findings if f.status == "error" and (f.check == CUDA_CHECK or not only_cuda)
    ]
    if errors:
        raise ConflictError(
            "; ".join(f.message for f in errors),
            hint=" / ".join(dict.fromkeys(f.fix for f in errors if f.fix)),
        )


def _linkage_against_overlay(
    loaded: LoadedProfile,
    native: NativeRequires,
    resolution: Resolution,
    host: HostSnapshot | None,
    finder: Finder | None,
    offline: bool,
) -> NativeRequires:
    """``native`` with the libraries its objects need that the resolved overlay's wheels ship;
    :class:`ConflictError` when a library is then still provided by no one on the recorded
    host."""
    from kvenv.lock.linkage import overlay_provides
    from kvenv.probe.linkage import SharedObject, wanted

    if native.linkage is None or loaded.profile.native is None:
        return native
    objects = [SharedObject(o.path, tuple(o.needed), o.soname) for o in native.linkage]
    libraries = wanted(objects, loaded.profile.target, loaded.profile.native.provided_libs or ())
    session = None if offline or finder is None else (lambda: finder.session)
    shipped = overlay_provides(
        [p.wheel for p in resolution.packages],
        libraries,
        cache=finder.cache if finder is not None else None,
        session=session,
    )
    _refuse_linkage(loaded, native.linkage, host, shipped)
    return attrs.evolve(native, overlay_provides=tuple(shipped))


def native_package(
    loaded: LoadedProfile,
    native: NativeRequires,
    index_wheel: WheelFile | None = None,
    previous: LockFile | None = None,
) -> LockedPackage | None:
    """The profile's native wheel as a locked package (written marked ``native = true``):
    an ``hf`` source by the Hub's resolve URL at the pinned revision, a ``url`` source by its
    URL, a ``path`` source by its file, an ``index`` source by its file on the index
    (``index_wheel``, found by sha256) else by its wheelhouse path. A portable lock writes
    every one but a path source as ``wheels/<filename>``. None only for an index source that
    names no file the index was seen to have."""
    profile = loaded.profile
    assert profile.native is not None
    pin = profile.native
    source = pin.source
    size: int | None = pin.size
    filename: str
    if isinstance(source, HfSource):
        filename, url = source.filename, hub_resolve_url(source)
    elif isinstance(source, UrlSource):
        filename, url = unquote(posixpath.basename(urlsplit(source.url).path)), source.url
    elif isinstance(source, PathSource):
        path = loaded.resolve(source.path).absolute()
        filename, url = path.name, path.as_uri()
        if size is None and path.is_file():
            size = path.stat().st_size
    elif index_wheel is not None:  # as the index lists it (upload time, requires-python)
        wheel = attrs.evolve(index_wheel, size=size if size is not None else index_wheel.size)
        return LockedPackage(
            wheel.name, wheel.version, wheel, native.requires, requires_python=wheel.requires_python
        )
    elif source.filename is not None:
        filename = source.filename
        url = (loaded.base_dir / WHEELHOUSE / filename).absolute().as_uri()
    else:
        return None
    if size is None and previous is not None:  # the file is gone: the size it was locked with
        size = _previous_native_size(previous, pin.sha256)
    version = Version(pin.version)
    wheel = WheelFile(
        canonicalize_name(pin.name), version, filename, url, 0, sha256=pin.sha256, size=size
    )
    return LockedPackage(canonicalize_name(pin.name), version, wheel, native.requires)


def _previous_native_size(previous: LockFile, sha256: str) -> int | None:
    for package, tool in zip(previous.pylock.packages, previous.package_tools, strict=True):
        if tool is not None and tool.native:
            for wheel in package.wheels or ():
                if wheel.hashes.get("sha256") == sha256:
                    return wheel.size
    return None


def _native_index_wheel(loaded: LoadedProfile, finder: Any) -> WheelFile | None:
    """An ``index`` native wheel's file on the index, found by sha256 (None when the source is
    not an index, or the index does not list it)."""
    pin = loaded.profile.native
    if finder is None or pin is None or not isinstance(pin.source, IndexSource):
        return None
    try:
        wheels = finder.project(pin.name).wheels
    except KvenvError:
        return None
    found: WheelFile | None = next((w for w in wheels if w.sha256 == pin.sha256), None)
    return found


def _lock(
    loaded: LoadedProfile,
    universe: Universe,
    options: LockOptions,
    *,
    native: NativeRequires,
    host: HostSnapshot | None,
    previous: LockFile | None,
    prefer: Mapping[NormalizedName, Version],
    native_wheel: WheelFile | None = None,
) -> tuple[str, Resolution]:
    """Build the request, resolve it against ``universe`` and render the lock text."""
    request, roots, constraints = build_request(
        loaded, options, native=native, host=host, previous=previous, prefer=prefer
    )
    wanted = asked(options)
    check_versions_exist(wanted, universe)
    resolution = resolve(request, universe)
    check_in_resolution(
        wanted, [p.name for p in resolution.packages], [n for n, _ in resolution.host_used]
    )
    refuse_protected_contents(resolution, request.protected, options.wheel_at_hand)
    no_remote = options.offline or options.native_requires is not None
    native = _linkage_against_overlay(
        loaded, native, resolution, host, getattr(universe, "finder", None), no_remote
    )
    text = render_lock(
        loaded,
        request,
        resolution,
        native=native,
        host=host,
        roots=roots,
        constraints=constraints,
        exclude_newer=options.exclude_newer,
        path=options.output or loaded.lock_path,
        portable=portable_choice(options, previous),
        native_wheel=native_wheel,
        previous=previous,
    )
    return text, resolution


def refuse_protected_contents(
    resolution: Resolution, protected: Sequence[str], at_hand: WheelAtHand | None = None
) -> None:
    """Raise :class:`ConflictError` when a resolved wheel that is on this machine (in a
    wheelhouse, or where ``at_hand`` finds it) ships a protected package's import name."""
    if not protected:
        return
    for package in resolution.packages:
        wheel = package.wheel
        local = wheel.local_path
        path = local if local is not None and local.is_file() else None
        if path is None and at_hand is not None and wheel.sha256 is not None:
            found = at_hand(wheel.sha256, wheel.filename, wheel.size)
            path = sized_file(found, wheel.size) if found else None
        if path is None:
            continue
        entries = protected_entries(path, protected)
        if entries:
            raise ConflictError(protected_message(wheel.filename, entries), hint=PROTECTED_FIX)


def render_lock(
    loaded: LoadedProfile,
    request: LockRequest,
    resolution: Resolution,
    *,
    native: NativeRequires,
    host: HostSnapshot | None,
    roots: list[str],
    constraints: list[str],
    exclude_newer: datetime | None,
    path: Path,
    portable: bool = False,
    native_wheel: WheelFile | None = None,
    previous: LockFile | None = None,
) -> str:
    profile = loaded.profile
    assert profile.native is not None
    table = KvenvTable(
        schema=1,
        profile=profile.name,
        profile_digest=loaded.digest,
        host_snapshot_digest=snapshot_digest(host) if host is not None else None,
        target=request.target.describe(),
        protected=sorted({canonicalize_name(n) for n in profile.host.protected}),
        native=NativeEntry(
            name=profile.native.name,
            version=profile.native.version,
            sha256=profile.native.sha256,
            requires=list(native.requires),
            requires_from=native.source,
            linkage=list(native.linkage) if native.linkage is not None else None,
            overlay_provides=list(native.overlay_provides) or None,
        ),
        requires=roots,
        constraints=constraints,
        exclude_newer=exclude_newer.isoformat() if exclude_newer else None,
        portable=portable,
        assumptions=[
            AssumptionEntry(a.name, a.requirement, a.required_by) for a in resolution.assumptions
        ],
        shadows=[
            ShadowEntry(s.name, s.host_version, s.overlay_version) for s in resolution.shadows
        ],
        waivers=[WaiverEntry(w.name, w.reason, list(w.dropped)) for w in resolution.waivers],
        relies_on=[
            f"{name}=={version}" if version is not None else name
            for name, version in resolution.host_used
        ],
    )
    wheelhouse = (loaded.base_dir / WHEELHOUSE).resolve() if portable else None
    document = build_lock(
        resolution,
        table,
        request.target,
        lock_dir=path.parent.resolve(),
        wheelhouse=wheelhouse,
        native=_with_dependencies(
            native_package(loaded, native, native_wheel, previous),
            resolution.native_dependencies,
        ),
    )
    return dumps_lock(document)


def _with_dependencies(
    package: LockedPackage | None, dependencies: tuple[NormalizedName, ...]
) -> LockedPackage | None:
    """The native package with the locked packages it requires as its ``dependencies``, as
    every other package of the lock has them (a plain PEP 751 reader sees the native's)."""
    if package is None:
        return None
    return attrs.evolve(package, dependencies=dependencies)


def lock_with_universe(
    loaded: LoadedProfile,
    universe: Universe,
    *,
    native: NativeRequires,
    options: LockOptions | None = None,
    host: HostSnapshot | None = None,
    previous: LockFile | None = None,
) -> tuple[str, Resolution]:
    """Lock against a given universe (tests and tools): the lock text and the resolution."""
    opts = options or LockOptions()
    return _lock(
        loaded,
        universe,
        opts,
        native=native,
        host=host,
        previous=previous,
        prefer=preferences(opts, previous),
        native_wheel=_native_index_wheel(loaded, getattr(universe, "finder", None)),
    )


def summary(result: LockResult) -> Mapping[str, object]:
    return {
        "lock": str(result.path),
        "target": result.target.describe(),
        "native-requires-from": result.native_from,
        "portable": result.portable,
        "changed": result.changed,
        "packages": [
            {"name": p.name, "version": str(p.version)} for p in result.resolution.packages
        ],
        "assumptions": len(result.resolution.assumptions),
        "shadows": [
            {"name": s.name, "host-version": s.host_version, "overlay-version": s.overlay_version}
            for s in result.resolution.shadows
        ],
    }


__all__ = ["KvenvError", "LockOptions", "LockResult", "lock_profile", "lock_with_universe"]
