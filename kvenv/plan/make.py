"""``kvenv plan``: what an apply would do, computed purely from its inputs.

Profile + lock + host snapshot + current manifest (+ which sha256s the cache and the store
already hold) -> host findings, the native wheel's tag check, the ordered steps with what is
already done, the artifacts, and what the overlay shadows on the host. No network, no disk.

A profile without ``[target]`` targets the host it is applied on: its target is taken from the
host snapshot (see :func:`effective_profile`); that is how the demo profile runs on any CPython.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import attrs
from packaging.utils import canonicalize_name

from kvenv.lock.input import LockInput
from kvenv.model import convert
from kvenv.model.loading import LoadedProfile
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot
from kvenv.model.target import target_from_host
from kvenv.plan.artifacts import Artifact
from kvenv.probe.checks import Finding, check_host

if TYPE_CHECKING:
    from kvenv.lock.pylock import LockFile
    from kvenv.probe.drift import DriftContext


class Applied(Protocol):
    """What a plan needs of the applied state (``kvenv.env.manifest.Manifest`` is one)."""

    @property
    def generation(self) -> str: ...

    def matches(
        self, profile_digest: str, lock_digest: str | None, native_sha: str | None
    ) -> bool: ...


StepName = Literal[
    "fetch",
    "verify",
    "install-native",
    "install-overlay",
    "write-manifest",
    "switch",
    "write-shims",
]


@attrs.frozen
class PlanFinding:
    check: str
    status: Literal["pass", "warning", "error", "untested"]
    message: str
    fix: str | None = None


# Fields with this metadata are part of the executable plan but not of its JSON form (they
# hold live objects: the profile, the host, each artifact's source).
INTERNAL = {"internal": True}


@attrs.frozen
class PlanArtifact:
    """One file to install: its identity (in the JSON form) and, internally, the
    :class:`~kvenv.plan.artifacts.Artifact` with its source, which apply fetches."""

    artifact: Artifact = attrs.field(eq=False, repr=False, metadata=INTERNAL)
    name: str
    version: str
    role: Literal["native", "overlay"]
    sha256: str
    size: int | None
    filename: str | None
    cached: bool
    unpacked: bool


@attrs.frozen
class Shadow:
    """A distribution the overlay provides that the host has at another version (or at an
    unknown one); the same version on both sides is not a shadow."""

    name: str
    overlay_version: str
    host_version: str | None  # None: present on the host, version unknown


def same_as_host(plan: Plan) -> list[str]:
    """``NAME VERSION`` of each overlay distribution the host has at the very same version
    (the lock was made for a host without it): installed, but nothing on the host changes."""
    out = []
    for a in plan.artifacts:
        on_host = plan.inputs.host.find(a.name) if a.role == "overlay" else None
        if on_host is not None and on_host.version == a.version:
            out.append(f"{canonicalize_name(a.name)} {a.version}")
    return out


@attrs.frozen
class Step:
    name: StepName
    done: bool
    detail: str


STEP_ORDER: tuple[StepName, ...] = get_args(StepName)  # the order a fresh plan lists them
# What each step needs to have run before it (apply refuses a plan that breaks this).
STEP_REQUIRES: dict[StepName, tuple[StepName, ...]] = {
    "fetch": (),
    "verify": ("fetch",),
    "install-native": ("verify",),
    "install-overlay": ("verify",),
    "write-manifest": ("install-native", "install-overlay"),
    "switch": ("write-manifest",),
    "write-shims": ("switch",),
}


@attrs.frozen
class PlanInputs:
    """What a plan was computed from, so that apply can execute it (and plan again when the
    root changed under it): the profile, its lock, the host, the recorded snapshot, and the
    root's locations (None for a plan made without a root, which cannot be applied)."""

    loaded: LoadedProfile
    lock: LockInput | None
    host: HostSnapshot
    recorded: HostSnapshot | None = None
    strict: bool = False
    locations: Locations | None = None


@attrs.frozen
class Plan:
    """What applying a profile does: host findings, the ordered steps with what is already
    done, the artifacts with their sources, what the overlay shadows on the host."""

    inputs: PlanInputs = attrs.field(eq=False, repr=False, metadata=INTERNAL)
    schema: Literal[1]
    profile: str
    profile_digest: str
    lock_digest: str | None
    target: str
    strict: bool
    compatible: bool
    up_to_date: bool
    findings: list[PlanFinding]
    steps: list[Step]
    artifacts: list[PlanArtifact]
    shadows: list[Shadow]
    current_generation: str | None = None

    @property
    def errors(self) -> list[PlanFinding]:
        return [f for f in self.findings if f.status == "error"]


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan's stable JSON form (``kvenv schema plan``): every field but the internal ones."""
    data: dict[str, Any] = _public(plan)
    return data


def _public(value: Any) -> Any:
    if attrs.has(type(value)):
        return {
            field.name: _public(getattr(value, field.name))
            for field in attrs.fields(type(value))
            if not field.metadata.get("internal")
        }
    if isinstance(value, list):
        return [_public(item) for item in value]
    return convert.unstructure(value)


def effective_profile(loaded: LoadedProfile, host: HostSnapshot) -> LoadedProfile:
    """``loaded`` with a target: its own, else the host's."""
    if loaded.profile.target is not None:
        return loaded
    profile = attrs.evolve(loaded.profile, target=target_from_host(host))
    return attrs.evolve(loaded, profile=profile)


def _native_tag_finding(loaded: LoadedProfile, filename: str | None) -> PlanFinding | None:
    from kvenv.model.target import TargetEnv

    target = loaded.profile.target
    if target is None or filename is None:
        return None
    env = TargetEnv.from_profile_target(target, file=str(loaded.path))
    check = "native wheel tags"
    if env.supports_wheel(filename):
        return PlanFinding(check, "pass", f"{check}: {filename} installs on {env.describe()}")
    return PlanFinding(
        check,
        "error",
        f"{check}: {filename} does not install on {env.describe()}",
        "pin a native wheel built for the target's Python, ABI and platform",
    )


RELOCK = "run `kvenv lock`"


def lock_findings(
    loaded: LoadedProfile,
    lockfile: LockFile,
    recorded: HostSnapshot | None,
    *,
    strict: bool = False,
) -> list[PlanFinding]:
    """The lock's ``[tool.kvenv]`` held against the profile: its protected set must cover the
    profile's, its native identity must be the profile's (errors), and its profile and
    host-snapshot digests must be current (a warning, an error under ``strict``)."""
    from kvenv.lock.check import digest_staleness

    table = lockfile.kvenv
    file = str(lockfile.path)
    out: list[PlanFinding] = []
    profile = loaded.profile
    wanted = {canonicalize_name(n) for n in profile.host.protected}
    missing = sorted(wanted - {canonicalize_name(n) for n in table.protected})
    if missing:
        out.append(
            PlanFinding(
                "lock protected",
                "error",
                f"lock protected: {file} does not protect {', '.join(missing)}, which the "
                "profile protects (the lock was made for another profile)",
                RELOCK,
            )
        )
    else:
        out.append(PlanFinding("lock protected", "pass", "lock protected: covers the profile's"))
    native = profile.native
    if native is not None:
        differs = [
            f"{field} {getattr(table.native, field)} (profile: {getattr(native, field)})"
            for field, same in (
                ("name", canonicalize_name(table.native.name) == canonicalize_name(native.name)),
                ("version", table.native.version == native.version),
                ("sha256", table.native.sha256 == native.sha256),
            )
            if not same
        ]
        if differs:
            out.append(
                PlanFinding(
                    "lock native",
                    "error",
                    f"lock native: the lock was made for another native wheel ({file}: "
                    f"$.tool.kvenv.native {'; '.join(differs)})",
                    RELOCK,
                )
            )
        else:
            out.append(PlanFinding("lock native", "pass", "lock native: the profile's wheel"))
    stale = digest_staleness(loaded, lockfile, recorded)
    if stale:
        out.append(
            PlanFinding(
                "lock current",
                "error" if strict else "warning",
                "lock current: lock is stale (the profile changed since it was locked): "
                + "; ".join(stale),
                RELOCK,
            )
        )
    else:
        out.append(PlanFinding("lock current", "pass", "lock current: digests match"))
    return out


def linkage_findings(
    loaded: LoadedProfile, lockfile: LockFile, host: HostSnapshot, *, strict: bool = False
) -> list[PlanFinding]:
    """What the native wheel's shared objects link, as the lock records it, held against the
    target and ``host`` (:mod:`kvenv.probe.linkage`); nothing without a native wheel or when
    the lock is another wheel's (the "lock native" finding says so)."""
    from kvenv.probe.linkage import SharedObject, check_linkage

    native = loaded.profile.native
    entry = lockfile.kvenv.native
    if native is None or (entry.sha256, entry.version) != (native.sha256, native.version):
        return []
    objects = (
        None
        if entry.linkage is None
        else [SharedObject(o.path, tuple(o.needed), o.soname) for o in entry.linkage]
    )
    findings = check_linkage(
        objects,
        native=f"{native.name} {native.version}",
        target=loaded.profile.target,
        host=host,
        declared=native.provided_libs or (),
        overlay=entry.overlay_provides or (),
        strict=strict,
    )
    return [_finding(f) for f in findings]


def drift_context(loaded: LoadedProfile, lockfile: LockFile | None) -> DriftContext:
    """What host drift is judged against (:mod:`kvenv.probe.drift`): the profile's target and
    snapshot, and the requirements its lock leaves to the host (those of the native wheel and
    of every locked package that no locked package provides, markers for the target)."""
    from kvenv.model.target import TargetEnv
    from kvenv.probe.drift import DriftContext, reliances_of

    profile = loaded.profile
    target = profile.target
    snapshot = profile.host.snapshot or f"profiles/{profile.name}.host.json"
    protected = frozenset(canonicalize_name(n) for n in profile.host.protected)
    base = DriftContext(
        profile=profile.name,
        snapshot=snapshot,
        protected=protected,
        driver_min=target.driver_min if target else None,
        glibc=target.glibc if target else None,
    )
    if lockfile is None or target is None:
        return base
    locked = frozenset(canonicalize_name(p.name) for p in lockfile.pylock.packages)
    native = lockfile.kvenv.native
    owners: list[tuple[str, Sequence[str], frozenset[str]]] = [
        (f"{native.name} {native.version}", native.requires, frozenset())
    ]
    for package, tool in zip(lockfile.pylock.packages, lockfile.package_tools, strict=True):
        if tool is not None:
            owners.append(
                (f"{package.name} {package.version}", tool.requires, frozenset(tool.extras))
            )
    env = TargetEnv.from_profile_target(target, file=str(loaded.path))
    # what the overlay provides, and what the profile waives (the host need not have it)
    waived = {canonicalize_name(w.name) for w in profile.host.waivers}
    provided = locked | {canonicalize_name(native.name)} | waived
    return attrs.evolve(
        base, locked=locked, reliances=tuple(reliances_of(owners, provided, env.evaluate))
    )


def make_plan(
    loaded: LoadedProfile,
    lock: LockInput | None,
    host: HostSnapshot,
    current: Applied | None,
    *,
    strict: bool = False,
    cached: frozenset[str] = frozenset(),
    unpacked: frozenset[str] = frozenset(),
    recorded: HostSnapshot | None = None,
) -> Plan:
    """The plan of applying ``loaded`` with ``lock`` onto ``host`` over ``current``."""
    from kvenv.model.target import TargetEnv
    from kvenv.plan.artifacts import artifacts_for

    profile = loaded.profile
    effective = effective_profile(loaded, host)
    findings = [_finding(f) for f in check_host(profile, host, strict=strict, recorded=recorded)]
    artifacts = artifacts_for(effective, lock.lockfile if lock else None)
    native = next((a for a in artifacts if a.role == "native"), None)
    tag = _native_tag_finding(effective, native.filename if native else None)
    if tag is not None:
        findings.append(tag)
    if lock is not None:
        findings.extend(lock_findings(loaded, lock.lockfile, recorded, strict=strict))
        findings.extend(linkage_findings(loaded, lock.lockfile, host, strict=strict))
    if recorded is not None and profile.target is not None:
        from kvenv.probe.drift import drift_findings

        context = drift_context(loaded, lock.lockfile if lock else None)
        findings += [_finding(f) for f in drift_findings(recorded, host, context, strict=strict)]
    compatible = not any(f.status == "error" for f in findings)
    lock_digest = lock.digest if lock else None
    up_to_date = current is not None and current.matches(
        loaded.digest, lock_digest, native.sha256 if native else None
    )
    planned = [
        PlanArtifact(
            artifact=a,
            name=a.name,
            version=a.version,
            role=a.role,
            sha256=a.sha256,
            size=a.size,
            filename=a.filename,
            cached=a.sha256 in cached,
            unpacked=a.sha256 in unpacked,
        )
        for a in artifacts
    ]
    shadows = []
    for a in planned:
        if a.role != "overlay":
            continue
        on_host = host.find(a.name)
        if on_host is not None and on_host.version != a.version:  # the same version: no shadow
            shadows.append(Shadow(canonicalize_name(a.name), a.version, on_host.version))
    assert effective.profile.target is not None
    target = TargetEnv.from_profile_target(effective.profile.target).describe()
    return Plan(
        inputs=PlanInputs(loaded, lock, host, recorded, strict),
        schema=1,
        profile=profile.name,
        profile_digest=loaded.digest,
        lock_digest=lock_digest,
        target=target + ("" if profile.target else " (the host)"),
        strict=strict,
        compatible=compatible,
        up_to_date=up_to_date,
        findings=findings,
        steps=_steps(planned, up_to_date),
        artifacts=planned,
        shadows=shadows,
        current_generation=current.generation if current else None,
    )


def with_presence(plan: Plan, cached: frozenset[str], unpacked: frozenset[str]) -> Plan:
    """``plan`` with each artifact marked cached/unpacked per the given sha256 sets (and its
    steps re-described): the same as planning again with them, without re-planning."""
    artifacts = [
        attrs.evolve(a, cached=a.sha256 in cached, unpacked=a.sha256 in unpacked)
        for a in plan.artifacts
    ]
    return attrs.evolve(plan, artifacts=artifacts, steps=_steps(artifacts, plan.up_to_date))


def _finding(finding: Finding) -> PlanFinding:
    return PlanFinding(finding.check, finding.status, finding.message, finding.fix)


def _count(items: Sequence[PlanArtifact], what: str) -> str:
    return f"{len(items)} {what}{'' if len(items) == 1 else 's'}"


def _steps(artifacts: list[PlanArtifact], up_to_date: bool) -> list[Step]:
    missing = [a for a in artifacts if not a.cached]
    native = [a for a in artifacts if a.role == "native"]
    overlay = [a for a in artifacts if a.role == "overlay"]

    def install_detail(items: list[PlanArtifact], where: str) -> str:
        if not items:
            return f"nothing to install into {where}"
        fresh = [a for a in items if not a.unpacked]
        return (
            f"{_count(items, 'wheel')} into {where}: {len(fresh)} to unpack into the store, "
            f"{len(items) - len(fresh)} linked from it"
        )

    fetch_detail = (
        "every artifact is in the cache"
        if not missing
        else f"download {_count(missing, 'artifact')} "
        f"({sum(a.size or 0 for a in missing)} bytes known)"
    )
    return [
        Step("fetch", up_to_date or not missing, fetch_detail),
        Step("verify", up_to_date, f"check sha256 and size of {_count(artifacts, 'artifact')}"),
        Step("install-native", up_to_date, install_detail(native, "the native dir")),
        Step("install-overlay", up_to_date, install_detail(overlay, "the overlay dir")),
        Step("write-manifest", up_to_date, "write the manifest into the new generation"),
        Step("switch", up_to_date, "make the new generation current (one atomic replace)"),
        Step("write-shims", up_to_date, "write activation scripts for the current generation"),
    ]
