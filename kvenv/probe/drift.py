"""Host drift: how a host differs from the profile's recorded snapshot, whether the lock still
holds on it, and what to do. Pure.

Hosted images are rebuilt every few weeks, so the snapshot a lock was made against goes stale.
:func:`host_changes` lists every difference (Python, platform, torch and its CUDA, the CUDA
toolkit, NCCL, the driver, the GPUs, each distribution); :func:`drift_findings` judges them:

- the Python minor version, the interpreter, OS or machine: the lock and the native wheel are
  for the recorded one (error; fix: a profile, native wheel and lock for the new one);
- torch's version or CUDA: the native wheel's compiled extensions are bound to the torch they
  were built against (error; fix: a native build for the new torch, then re-fingerprint and
  re-lock);
- a distribution the lock leaves to the host (a *reliance*: a requirement of the native wheel
  or of a locked package that no locked package provides): checked against the live version;
  still satisfied is a warning (re-fingerprint to record it), not satisfied or gone is an error
  (fix: re-fingerprint and re-lock: the re-resolve adds what the host no longer provides);
- a driver below the target's minimum, a glibc below the target's: error; other driver, glibc,
  toolkit, NCCL, GPU and patch-level Python changes: warnings, the lock holds;
- other distributions: one summary line (the lock does not rely on them; the overlay shadows
  the ones it installs).

A distribution recorded with an unknown version is an *assumption*: its live version is checked
against every reliance as well, so an assumption the real host breaks is found here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Literal

import attrs
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from kvenv._util.versions import parse_version
from kvenv.model.snapshot import HostSnapshot
from kvenv.probe.checks import Finding

__all__ = [
    "Change",
    "DriftContext",
    "Reliance",
    "drift_findings",
    "host_changes",
    "reliances_of",
]

ChangeKind = Literal[
    "python",
    "implementation",
    "os",
    "machine",
    "glibc",
    "torch",
    "torch-cuda",
    "cuda-toolkit",
    "nccl",
    "driver",
    "gpus",
    "package",
]
DRIFT_CHECK = "host drift"


@attrs.frozen
class Change:
    """One difference: ``recorded`` is the profile's snapshot, ``live`` the host; None is
    absent (a distribution) or not known."""

    kind: ChangeKind
    name: str
    recorded: str | None
    live: str | None

    def describe(self) -> str:
        if self.kind == "package":
            if self.recorded is None and self.live is not None:
                return f"{self.name} added ({self.live})"
            if self.live is None:
                return f"{self.name} removed (was {self.recorded})"
        return f"{self.name} {self.recorded or 'none'} -> {self.live or 'none'}"

    def to_json(self) -> dict[str, str | None]:
        return {"kind": self.kind, "name": self.name, "recorded": self.recorded, "live": self.live}


@attrs.frozen
class Reliance:
    """A requirement the lock leaves to the host."""

    name: str  # normalised
    requirement: str
    required_by: str

    @property
    def specifier(self) -> SpecifierSet:
        return Requirement(self.requirement).specifier


@attrs.frozen
class DriftContext:
    """What the verdicts are judged against: the profile and its lock."""

    profile: str
    snapshot: str  # the profile's host.snapshot, as written in the profile
    protected: frozenset[str] = frozenset()  # normalised names
    locked: frozenset[str] = frozenset()  # normalised names the overlay installs
    reliances: tuple[Reliance, ...] = ()
    driver_min: str | None = None
    glibc: str | None = None  # the target's

    @property
    def refresh(self) -> str:
        return (
            f"re-fingerprint the host (`kvenv fingerprint --save {self.snapshot}` on it) and "
            f"re-lock (`kvenv lock {self.profile}`)"
        )


def _numbers(text: str | None) -> tuple[int, ...]:
    out: list[int] = []
    for part in (text or "").split("+")[0].split("."):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def _gpus(snap: HostSnapshot) -> str | None:
    if not snap.gpus:
        return None
    names: dict[str, int] = {}
    for gpu in snap.gpus:
        label = gpu.name + (f" (SM {gpu.compute_capability})" if gpu.compute_capability else "")
        names[label] = names.get(label, 0) + 1
    return ", ".join(f"{n} x {label}" for label, n in names.items())


def host_changes(recorded: HostSnapshot, live: HostSnapshot) -> list[Change]:
    """Every difference between the recorded snapshot and the live host, facts first, then
    distributions by name. A version unknown on either side is not a difference."""
    out: list[Change] = []

    def fact(kind: ChangeKind, name: str, old: str | None, new: str | None) -> None:
        differs = old is not None and new is not None and old != new
        appeared = (old is None) != (new is None) and kind in ("torch", "gpus")
        if differs or appeared:
            out.append(Change(kind, name, old, new))

    fact("python", "python", recorded.python.version, live.python.version)
    fact(
        "implementation",
        "implementation",
        recorded.python.implementation,
        live.python.implementation,
    )
    fact("os", "os", recorded.platform.os, live.platform.os)
    fact("machine", "machine", recorded.platform.machine, live.platform.machine)
    fact("glibc", "glibc", recorded.platform.libc_version, live.platform.libc_version)
    rt, lt = recorded.torch, live.torch
    fact("torch", "torch", rt.version if rt else None, lt.version if lt else None)
    fact("torch-cuda", "torch CUDA", rt.cuda if rt else None, lt.cuda if lt else None)
    fact("nccl", "NCCL", rt.nccl if rt else None, lt.nccl if lt else None)
    rc, lc = recorded.cuda, live.cuda
    fact(
        "cuda-toolkit",
        "CUDA toolkit",
        rc.toolkit_version if rc else None,
        lc.toolkit_version if lc else None,
    )
    rd, ld = recorded.driver, live.driver
    fact("driver", "NVIDIA driver", rd.version if rd else None, ld.version if ld else None)
    fact("gpus", "GPUs", _gpus(recorded), _gpus(live))
    old = {canonicalize_name(d.name): d for d in recorded.distributions}
    new = {canonicalize_name(d.name): d for d in live.distributions}
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if key == "torch" and before is not None and after is not None:
            continue  # torch's version is the torch fact above
        if before is None and after is not None:
            out.append(Change("package", key, None, after.version or "version unknown"))
        elif after is None and before is not None:
            out.append(Change("package", key, before.version or "version unknown", None))
        elif before is not None and after is not None:
            v1, v2 = parse_version(before.version), parse_version(after.version)
            if v1 is not None and v2 is not None and v1 != v2:
                out.append(Change("package", key, before.version, after.version))
    return out


def reliances_of(
    requires_by: Iterable[tuple[str, Sequence[str], frozenset[str]]],
    provided: Collection[str],
    evaluate: Callable[[Marker | None, frozenset[str]], bool],
) -> list[Reliance]:
    """The requirements of each owner (a label, its Requires-Dist lines, the extras in use:
    the native wheel, each locked package) that apply to the target and that nothing in
    ``provided`` (normalised names the lock installs, the native wheel's included) satisfies:
    what the lock leaves to the host."""
    out: list[Reliance] = []
    seen: set[tuple[str, str, str]] = set()
    for owner, lines, extras in requires_by:
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if not evaluate(req.marker, extras):
                continue
            key = canonicalize_name(req.name)
            if key in provided:
                continue
            text = f"{req.name}{req.specifier}"
            if (key, text, owner) not in seen:
                seen.add((key, text, owner))
                out.append(Reliance(key, text, owner))
    return out


def _finding(
    status: Literal["pass", "warning", "error", "untested"], message: str, fix: str | None
) -> Finding:
    return Finding(DRIFT_CHECK, status, f"{DRIFT_CHECK}: {message}", fix)


def drift_findings(
    recorded: HostSnapshot, live: HostSnapshot, context: DriftContext, *, strict: bool = False
) -> list[Finding]:
    """The verdicts on ``live`` against ``recorded`` (see the module docstring); one ``pass``
    finding when nothing changed. ``strict`` makes warnings errors."""
    changes = host_changes(recorded, live)
    out: list[Finding] = []
    by_kind: dict[str, Change] = {c.kind: c for c in changes if c.kind != "package"}
    out += _platform(by_kind, context)
    out += _torch(by_kind, context)
    out += _system(by_kind, context)
    out += _packages(changes, live, context)
    if not out:
        out = [
            _finding(
                "pass",
                f"none: this host matches the snapshot {context.snapshot}; the lock holds",
                None,
            )
        ]
    if strict:
        out = [attrs.evolve(f, status="error") if f.status == "warning" else f for f in out]
    return out


def _platform(by_kind: dict[str, Change], ctx: DriftContext) -> list[Finding]:
    out: list[Finding] = []
    py = by_kind.get("python")
    if py is not None:
        same_minor = _numbers(py.recorded)[:2] == _numbers(py.live)[:2]
        if same_minor:
            out.append(
                _finding(
                    "warning",
                    f"Python {py.recorded} -> {py.live} (same minor version): the lock still "
                    "holds (its markers and wheels are for the minor version)",
                    f"record the new patch level: {ctx.refresh}",
                )
            )
        else:
            out.append(
                _finding(
                    "error",
                    f"Python {py.recorded} -> {py.live}: the lock does not hold (its wheels, "
                    f"markers and the native wheel are for Python {py.recorded})",
                    f"make a profile for Python {py.live}: a native wheel built for it, then "
                    f"{ctx.refresh}",
                )
            )
    for kind in ("implementation", "os", "machine"):
        change = by_kind.get(kind)
        if change is not None:
            out.append(
                _finding(
                    "error",
                    f"{change.describe()}: the lock and the native wheel do not hold here",
                    "use a profile made for this platform",
                )
            )
    return out


def _torch(by_kind: dict[str, Change], ctx: DriftContext) -> list[Finding]:
    out: list[Finding] = []
    torch, cuda = by_kind.get("torch"), by_kind.get("torch-cuda")
    if torch is not None:
        if torch.live is None:
            out.append(
                _finding(
                    "error",
                    f"torch {torch.recorded} -> none: the host no longer provides torch, which "
                    "the native wheel needs (it is protected: kvenv never installs it)",
                    "use a host that provides the recorded torch",
                )
            )
        else:
            pins = [
                f"; {r.required_by} requires {r.requirement}, which {torch.live} does not satisfy"
                for r in ctx.reliances
                if r.name == "torch" and not _admits(r, torch.live)
            ]
            out.append(
                _finding(
                    "error",
                    f"torch {torch.recorded or 'none'} -> {torch.live}: the native wheel does not "
                    f"hold (its compiled extensions are bound to torch {torch.recorded}'s ABI"
                    f"{''.join(pins)})",
                    f"build the native wheel for torch {torch.live} on this image, pin it in "
                    f"[native], then {ctx.refresh}",
                )
            )
    if cuda is not None and torch is None:
        out.append(
            _finding(
                "error",
                f"torch CUDA {cuda.recorded} -> {cuda.live}: the native wheel does not hold (it "
                f"was built for CUDA {cuda.recorded})",
                f"build the native wheel for CUDA {cuda.live}, pin it, then {ctx.refresh}",
            )
        )
    return out


def _admits(reliance: Reliance, version: str) -> bool:
    parsed = parse_version(version)
    return parsed is not None and reliance.specifier.contains(parsed, prereleases=True)


def _system(by_kind: dict[str, Change], ctx: DriftContext) -> list[Finding]:
    out = _at_least(
        by_kind.get("driver"),
        ctx.driver_min,
        f"below the target's minimum {ctx.driver_min}; the native wheel's CUDA code may not load",
        f"use a host with driver >= {ctx.driver_min}",
        still=f"record it: {ctx.refresh}",
    )
    out += _at_least(
        by_kind.get("glibc"),
        ctx.glibc,
        f"below the target's {ctx.glibc}; locked manylinux wheels may not load",
        f"use a host with glibc >= {ctx.glibc}",
        still=ctx.refresh,
    )
    for kind, why in (
        ("cuda-toolkit", "the installed wheels use torch's CUDA runtime; a native build needs it"),
        ("nccl", "NCCL comes with torch's wheels; tensor parallelism may behave differently"),
        ("gpus", "the lock is unaffected; check the runtime's tensor-parallel size and dtype"),
    ):
        change = by_kind.get(kind)
        if change is not None:
            out.append(
                _finding(
                    "warning",
                    f"{change.describe()}: the lock still holds ({why})",
                    f"record it: {ctx.refresh}",
                )
            )
    return out


def _at_least(
    change: Change | None, minimum: str | None, below: str, fix: str, *, still: str
) -> list[Finding]:
    """A host fact the target sets a minimum for (the driver, glibc): an error below
    ``minimum``, else a warning that the lock still holds (``still`` is its fix)."""
    if change is None:
        return []
    if minimum and _numbers(change.live) < _numbers(minimum):
        return [_finding("error", f"{change.describe()}: {below}", fix)]
    return [_finding("warning", f"{change.describe()}: the lock still holds", still)]


def _packages(changes: Sequence[Change], live: HostSnapshot, ctx: DriftContext) -> list[Finding]:
    relied: dict[str, list[Reliance]] = {}
    for reliance in ctx.reliances:
        if reliance.name not in ctx.protected:
            relied.setdefault(reliance.name, []).append(reliance)
    changed = {c.name: c for c in changes if c.kind == "package"}
    gone: list[tuple[str, str]] = []  # (short, detailed)
    broken: list[tuple[str, str]] = []
    holds: list[tuple[str, str]] = []
    out: list[Finding] = []
    for name in sorted(relied):
        wants = relied[name]
        change = changed.get(name)
        dist = live.find(name)
        needs = "; ".join(f"{r.requirement} ({r.required_by})" for r in wants)
        if dist is None:
            if change is None:  # absent when the lock was made too: not a change of the host
                continue
            was = f"was {change.recorded}"
            gone.append((f"{name} ({was})", f"{name} ({was}; needed: {needs})"))
            continue
        version = parse_version(dist.version)
        if version is None:
            if change is not None:
                out.append(
                    _finding(
                        "untested",
                        f"{change.describe()}: its version is unknown; the lock relies on it: "
                        f"{needs}",
                        ctx.refresh,
                    )
                )
            continue
        unmet = [r for r in wants if not r.specifier.contains(version, prereleases=True)]
        moved = change.describe() if change else f"{name} {version} (recorded: version unknown)"
        if unmet:
            why = "; ".join(f"{r.requirement} ({r.required_by})" for r in unmet)
            broken.append((f"{moved} (needs {why})", f"{moved}, which does not satisfy {why}"))
        elif change is not None:
            holds.append((moved, f"{moved} (needed: {needs})"))
    if broken:
        out.append(
            _finding(
                "error",
                f"{_count(broken)} the lock relies on the host for changed and no longer "
                f"{'fits' if len(broken) == 1 else 'fit'}, so the lock does not hold: "
                f"{_listed(broken)}",
                f"{ctx.refresh}; the re-resolve puts a fitting version in the overlay",
            )
        )
    if gone:
        out.append(
            _finding(
                "error",
                f"{_count(gone)} the lock relies on the host for "
                f"{'is' if len(gone) == 1 else 'are'} gone from the host, so the lock does not "
                f"hold: {_listed(gone)}",
                f"{ctx.refresh}; the re-resolve puts {'it' if len(gone) == 1 else 'them'} in "
                "the overlay",
            )
        )
    if holds:
        out.append(
            _finding(
                "warning",
                f"{_count(holds)} the lock relies on the host for changed and still "
                f"{'fits' if len(holds) == 1 else 'fit'} what it needs, so the lock holds: "
                f"{_listed(holds)}",
                f"record the new versions: {ctx.refresh}",
            )
        )
    others = [c for c in changes if c.kind == "package" and c.name not in relied]
    shadowed = [c for c in others if c.name in ctx.locked and c.live is not None]
    if others:
        shown = ", ".join(c.describe() for c in others[:8])
        more = f" and {len(others) - 8} more" if len(others) > 8 else ""
        tail = (
            f"; the overlay installs {len(shadowed)} of them and shadows the host's"
            if shadowed
            else ""
        )
        out.append(
            _finding(
                "pass",
                f"{len(others)} other distribution(s) differ from the snapshot ({shown}{more}); "
                f"the lock does not rely on them{tail}: it holds",
                None,
            )
        )
    return out


DETAIL_UP_TO = 3  # list what each needs for this many; beyond, names only
LIST_UP_TO = 12


def _listed(items: Sequence[tuple[str, str]]) -> str:
    if len(items) <= DETAIL_UP_TO:
        return " / ".join(detailed for _, detailed in items)
    shown = ", ".join(short for short, _ in items[:LIST_UP_TO])
    more = f" and {len(items) - LIST_UP_TO} more" if len(items) > LIST_UP_TO else ""
    return shown + more


def _count(items: Sequence[object]) -> str:
    return "1 distribution" if len(items) == 1 else f"{len(items)} distributions"
