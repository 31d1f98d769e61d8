"""``kvenv doctor``: a host held against a profile, and an applied overlay held against what
was installed and what the native wheel requires.

Host findings come from :func:`kvenv.probe.checks.check_host`. When a generation is applied, each
distribution its manifest lists is looked up where it was installed, and each requirement of
the native wheel (markers evaluated for the profile's target) is looked up in the overlay, the
native dir and then the host, each getting the reference system's dependency status:

- ``error``: missing, malformed version metadata, or outside the required specifier;
- ``warning`` (``error`` with ``strict``): installed at another version than recorded;
- ``untested``: present with a version nobody recorded, or an optional extra not installed;
- ``pass``: otherwise.

The report is compatible when nothing is an error. Pure apart from :func:`installed_in`,
which reads the generation's directories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kvenv._util.versions import parse_version
from kvenv.model.profile import Profile
from kvenv.model.snapshot import Distribution, HostSnapshot
from kvenv.probe.checks import Finding, Status, check_host
from kvenv.probe.drift import DriftContext, drift_findings

REPORT_SCHEMA = 1
STATUSES: tuple[Status, ...] = ("pass", "warning", "error", "untested")


@attrs.frozen
class DependencyFinding:
    distribution: str
    status: Status
    message: str
    source: str  # "overlay", "native", "native requirement"
    installed_version: str | None = None
    expected_version: str | None = None
    specifier: str | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "distribution": self.distribution,
            "status": self.status,
            "installed_version": self.installed_version,
            "expected_version": self.expected_version,
            "specifier": self.specifier,
            "source": self.source,
            "message": self.message,
            "fix": self.fix,
        }


@attrs.frozen
class InstalledOverlay:
    """The applied generation as doctor sees it: what the manifest recorded (name, version,
    layer), what the generation's directories hold, and the native wheel's requirements."""

    generation: str
    expected: tuple[tuple[str, str, str], ...]
    installed: Mapping[str, Distribution]
    native_requires: tuple[str, ...] = ()


@attrs.frozen
class DoctorReport:
    profile: str
    strict: bool
    host_source: str
    host: HostSnapshot
    findings: tuple[Finding, ...]
    dependencies: tuple[DependencyFinding, ...] | None  # None: no overlay applied
    overlay_note: str

    @property
    def compatible(self) -> bool:
        every = [f.status for f in self.findings]
        every += [d.status for d in self.dependencies or ()]
        return "error" not in every

    def summary(self) -> dict[str, dict[str, int]]:
        def count(statuses: Iterable[str]) -> dict[str, int]:
            seen = list(statuses)
            return {status: seen.count(status) for status in STATUSES}

        return {
            "host": count(f.status for f in self.findings),
            "dependencies": count(d.status for d in self.dependencies or ()),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "profile": self.profile,
            "strict": self.strict,
            "host_source": self.host_source,
            "compatible": self.compatible,
            "findings": [f.to_json() for f in self.findings],
            "overlay": {
                "applied": self.dependencies is not None,
                "note": self.overlay_note,
                "dependencies": [d.to_json() for d in self.dependencies or ()],
            },
            "summary": self.summary(),
        }


def _malformed(dist: Distribution) -> bool:
    return dist.version is None and bool(dist.note and dist.note.startswith("malformed"))


def check_installed(
    expected: Sequence[tuple[str, str, str]],
    installed: Mapping[str, Distribution],
    *,
    strict: bool = False,
) -> list[DependencyFinding]:
    """Each (name, version, layer) the manifest recorded, against what the generation holds."""
    out: list[DependencyFinding] = []
    for name, version, layer in expected:
        have = installed.get(canonicalize_name(name))
        status: Status = "error"
        fix: str | None = "rebuild it: `{kvenv apply --repair}`"
        if have is None:
            message = f"{name} {version} is missing from the {layer} directory"
            fix = "rebuild it: `{kvenv apply --repair}` (`{kvenv verify}` lists every damaged file)"
        elif _malformed(have) or have.version is None:
            message = f"{name} has malformed version metadata ({have.note})"
        elif parse_version(have.version) != parse_version(version):
            status = "error" if strict else "warning"
            message = f"{name} {have.version} differs from the applied {version}"
            fix = "something changed the overlay; rebuild it: `{kvenv apply --repair}`"
        else:
            status, message, fix = "pass", f"{name} {version}", None
        out.append(
            DependencyFinding(
                name,
                status,
                message,
                layer,
                installed_version=have.version if have is not None else None,
                expected_version=version,
                fix=fix,
            )
        )
    return out


def check_requirements(
    requires: Sequence[str],
    provided: Mapping[str, tuple[Distribution, str]],
    evaluate: Callable[[Marker | None], bool],
    *,
    quiet: Iterable[str] = (),
    waived: Mapping[str, str] | None = None,
) -> list[DependencyFinding]:
    """Each requirement of the native wheel that applies to the target, against the
    distribution that provides it (name -> (distribution, where: overlay/native/host)).
    Passing requirements on ``quiet`` names (already reported as installed) are left out.
    A requirement on a name in ``waived`` (the profile's ``[[host.waivers]]``: name -> reason)
    is not required: it passes with its reason, as the lock dropped it."""
    hushed = {canonicalize_name(n) for n in quiet}
    waivers = {canonicalize_name(n): reason for n, reason in (waived or {}).items()}
    out: list[DependencyFinding] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            out.append(
                DependencyFinding(line, "error", f"unparseable requirement {line!r}", "native")
            )
            continue
        key = canonicalize_name(req.name)
        if not evaluate(req.marker):
            continue
        spec = str(req.specifier) or None
        found = provided.get(key)
        if key in waivers:
            out.append(
                DependencyFinding(
                    req.name,
                    "pass",
                    f"{req.name}{spec or ''} is waived by the profile: {waivers[key]}",
                    "native requirement (waived)",
                    installed_version=found[0].version if found is not None else None,
                    specifier=spec,
                )
            )
            continue
        if found is None:
            out.append(
                DependencyFinding(
                    req.name,
                    "error",
                    f"{req.name}{spec or ''} is required by the native wheel and not installed",
                    "native requirement",
                    specifier=spec,
                    fix="re-lock (`{kvenv lock}`) and re-apply, or waive it in the profile",
                )
            )
            continue
        dist, where = found
        parsed = parse_version(dist.version)
        status: Status = "error"
        fix = None
        if parsed is None and _malformed(dist):
            message, fix = f"{req.name} has {dist.note}", f"reinstall {req.name}"
        elif parsed is None:
            status = "untested"
            message = f"{req.name} is on the {where} with an unrecorded version"
            fix = "check it on the host: `kvenv doctor` without --host"
        elif req.specifier.contains(parsed, prereleases=True):
            if key in hushed:
                continue
            status = "pass"
            message = f"{req.name} {dist.version} satisfies {spec or 'any version'}"
        else:
            message = f"{req.name} {dist.version} does not satisfy {spec}"
            fix = "re-lock (`{kvenv lock}`) and re-apply"
        out.append(
            DependencyFinding(
                req.name,
                status,
                message,
                f"native requirement ({where})",
                installed_version=None if parsed is None else dist.version,
                specifier=spec,
                fix=fix,
            )
        )
    return out


def provided_by(
    overlay: InstalledOverlay, host: HostSnapshot
) -> dict[str, tuple[Distribution, str]]:
    """Who provides each name at run time: the overlay/native dirs, then the host."""
    provided: dict[str, tuple[Distribution, str]] = {
        canonicalize_name(d.name): (d, "host") for d in host.distributions
    }
    layers: dict[str, str] = {canonicalize_name(n): layer for n, _, layer in overlay.expected}
    for key, dist in overlay.installed.items():
        provided[key] = (dist, layers.get(key, "overlay"))
    return provided


def diagnose(
    profile: Profile,
    host: HostSnapshot,
    *,
    host_source: str,
    strict: bool = False,
    recorded: HostSnapshot | None = None,
    overlay: InstalledOverlay | None = None,
    overlay_note: str = "no overlay applied",
    evaluate: Callable[[Marker | None], bool] | None = None,
    drift: DriftContext | None = None,
) -> DoctorReport:
    """The whole doctor report. ``evaluate`` decides which native requirements apply (the
    profile's target markers); without it the native requirements are not checked. With
    ``drift`` and ``recorded``, how the host differs from the recorded snapshot is judged too
    (:mod:`kvenv.probe.drift`)."""
    findings = check_host(profile, host, strict=strict, recorded=recorded)
    if drift is not None and recorded is not None and profile.target is not None:
        findings += drift_findings(recorded, host, drift, strict=strict)
    dependencies: list[DependencyFinding] | None = None
    if overlay is not None:
        dependencies = check_installed(overlay.expected, overlay.installed, strict=strict)
        if evaluate is not None and overlay.native_requires:
            dependencies += check_requirements(
                overlay.native_requires,
                provided_by(overlay, host),
                evaluate,
                quiet=[name for name, _, _ in overlay.expected],
                waived={w.name: w.reason for w in profile.host.waivers},
            )
    return DoctorReport(
        profile=profile.name,
        strict=strict,
        host_source=host_source,
        host=host,
        findings=tuple(findings),
        dependencies=tuple(dependencies) if dependencies is not None else None,
        overlay_note=overlay_note,
    )


def installed_in(
    generation: str,
    expected: Sequence[tuple[str, str, str]],
    dirs: Sequence[Path],
    native: str | None,
) -> InstalledOverlay:
    """Read what the generation's directories hold (the edge of this module)."""
    from kvenv.probe.dists import read_distributions

    found, _ = read_distributions([str(d) for d in dirs if d.is_dir()])
    installed: dict[str, Distribution] = {canonicalize_name(d.name): d for d in found}
    requires: tuple[str, ...] = ()
    if native is not None and canonicalize_name(native) in installed:
        requires = tuple(installed[canonicalize_name(native)].requires or ())
    return InstalledOverlay(generation, tuple(expected), installed, requires)
