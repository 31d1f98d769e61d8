"""Resolution: a :class:`LockRequest` and a universe in, a :class:`Resolution` out (pure over
the universe). Conflicts become :class:`ConflictError` explaining the chain in words."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from kvenv.errors import ConflictError, Problem
from kvenv.lock.candidates import (
    Candidate,
    Following,
    Req,
    Universe,
    name_key,
    split_identifier,
)
from kvenv.lock.finder import WheelFile
from kvenv.lock.provider import NativeWheel, Policy, Provider, parse_requirement
from kvenv.model.snapshot import HostSnapshot
from kvenv.model.target import TargetEnv

MAX_ROUNDS = 20000


@attrs.frozen
class RootRequirement:
    text: str
    origin: str  # e.g. the file it came from


@attrs.frozen
class LockRequest:
    """Everything resolution depends on."""

    target: TargetEnv
    native: NativeWheel
    host: HostSnapshot | None = None
    protected: tuple[str, ...] = ()
    waivers: Mapping[str, str] = attrs.field(factory=dict)  # name -> reason
    roots: tuple[RootRequirement, ...] = ()
    prefer: Mapping[NormalizedName, Version] = attrs.field(factory=dict)
    constraints: Mapping[NormalizedName, SpecifierSet] = attrs.field(factory=dict)

    def policy(self) -> Policy:
        return Policy(
            protected=frozenset(name_key(n) for n in self.protected),
            waived=frozenset(name_key(n) for n in self.waivers),
            prefer=self.prefer,
            constraints=self.constraints,
        )


@attrs.frozen
class LockedPackage:
    name: NormalizedName
    version: Version
    wheel: WheelFile
    requires: tuple[str, ...]
    extras: tuple[str, ...] = ()
    marker: str | None = None
    dependencies: tuple[NormalizedName, ...] = ()
    requires_python: str | None = None


@attrs.frozen
class Assumption:
    name: NormalizedName
    requirement: str
    required_by: str


@attrs.frozen
class HostShadow:
    """A host distribution the overlay installs another version of (it shadows the host's)."""

    name: NormalizedName
    host_version: str
    overlay_version: str


@attrs.frozen
class WaiverUse:
    name: str
    reason: str
    dropped: tuple[str, ...] = ()


@attrs.frozen
class Resolution:
    packages: tuple[LockedPackage, ...]
    assumptions: tuple[Assumption, ...] = ()
    shadows: tuple[HostShadow, ...] = ()
    waivers: tuple[WaiverUse, ...] = ()
    # the host's distributions the resolution relies on: (name, version; None: unknown)
    host_used: tuple[tuple[NormalizedName, str | None], ...] = ()
    # the locked packages the native wheel itself requires (its PEP 751 ``dependencies``)
    native_dependencies: tuple[NormalizedName, ...] = ()

    def names(self) -> list[str]:
        return [p.name for p in self.packages]


def resolve(request: LockRequest, universe: Universe) -> Resolution:
    """Resolve the native wheel's requirements (and the extra roots) for the target.

    A requirement nothing can meet (a protected package the host lacks or has in another
    version, a package no source lists) does not stop at the first: it is set aside and the
    resolution runs again, so one :class:`ConflictError` lists every such requirement, each
    with its fix (:func:`unmet_error`)."""
    from resolvelib import ResolutionImpossible

    unmet: list[Problem] = []
    first: ConflictError | None = None  # the error a lock without this search would give
    skipped: frozenset[str] = frozenset()
    policy = request.policy()
    while True:
        provider = Provider(
            target=request.target,
            universe=universe,
            host=request.host,
            native=request.native,
            policy=attrs.evolve(policy, waived=policy.waived | skipped),
        )
        try:
            result, waived_roots = _attempt(request, universe, provider)
        except ResolutionImpossible as exc:
            causes = list(exc.causes)
            names = {name_key(cause.requirement.name) for cause in causes}
            if (
                names
                and not names & skipped
                and all(
                    _unavailable(cause.requirement.name, provider, universe) for cause in causes
                )
            ):
                first = first or explain_conflict(causes, provider, universe, request)
                unmet.extend(_unmet_problems(causes, provider, universe))
                skipped |= names
                continue
            error = explain_conflict(causes, provider, universe, request)
            if not unmet:
                raise error from None
            raise unmet_error([*unmet, *error.problems], request) from None
        if first is not None and len(unmet) == 1:  # the one problem, now with its fix
            raise ConflictError(first.message, problems=unmet, hint=first.hint)
        if unmet:
            raise unmet_error(unmet, request)
        return _collect(result, provider, universe, request, waived_roots)


def _attempt(
    request: LockRequest, universe: Universe, provider: Provider
) -> tuple[Any, list[tuple[str, str]]]:
    """One run of the resolver with ``provider``: its result and the waived roots."""
    from resolvelib import BaseReporter, ResolutionTooDeep, Resolver

    roots = [Req.pinned(provider.native_candidate())]
    waived_roots: list[tuple[str, str]] = []
    for root in request.roots:
        req = parse_requirement(root.text, owner=root.origin)
        if not request.target.evaluate(req.marker):
            continue
        if name_key(req.name) in provider.policy.waived:
            waived_roots.append((name_key(req.name), f"{root.text} (required by {root.origin})"))
            continue
        roots.append(Req.from_requirement(req, origin=root.origin))
    if isinstance(universe, Following):
        provider.note_extras(roots[1:])
        universe.follow(provider.wanted_by)
    universe.prefetch(
        [(r.name, r.specifier) for r in roots[1:] if not provider.is_protected(r.name)]
    )
    universe.prefetch(_native_wants(provider))
    resolver: Resolver[Req, Candidate, str] = Resolver(provider, BaseReporter())
    try:
        return resolver.resolve(roots, max_rounds=MAX_ROUNDS), waived_roots
    except ResolutionTooDeep:
        raise ConflictError(
            f"resolution did not finish in {MAX_ROUNDS} rounds",
            hint="pin some versions with --constraint or --prefer to narrow the search",
        ) from None


def _unavailable(name: str, provider: Provider, universe: Universe) -> bool:
    """Whether no candidate at all can meet a requirement on ``name``: a protected package
    (only the host's may, and it did not), or one that neither the host nor any source has."""
    key = NormalizedName(canonicalize_name(name))
    if provider.is_protected(key):
        return True
    if key == provider.native.name:
        return False
    return provider.host_candidate(key) is None and not list(universe.versions(key))


def _unmet_problems(causes: Sequence[Any], provider: Provider, universe: Universe) -> list[Problem]:
    """One problem per name in ``causes`` (requirements nothing can meet), with its fix."""
    by_name: dict[str, list[tuple[Req, Candidate | None]]] = defaultdict(list)
    for cause in causes:
        pair = (cause.requirement, cause.parent)
        if pair not in by_name[cause.requirement.name]:
            by_name[cause.requirement.name].append(pair)
    problems = []
    for name in sorted(by_name):
        pairs = by_name[name]
        wants = "; ".join(
            f"{_who(parent, req)} requires {req.text}" for req, parent in sorted(pairs, key=_key)
        )
        reason = _why_not(NormalizedName(name), [r for r, _ in pairs], provider, universe)
        problems.append(
            Problem(
                f"{wants}; {reason}",
                path=name,
                fix=_unmet_fix(NormalizedName(name), provider),
            )
        )
    return problems


def _unmet_fix(name: NormalizedName, provider: Provider) -> str:
    waive = f'[[host.waivers]] name = "{name}" with a reason'
    if provider.is_protected(name):
        host = provider.host_candidate(name)
        if host is None:
            return (
                f"waive it ({waive}) if the native wheel works without it, or install {name} "
                "on the host and record the host snapshot again (`kvenv fingerprint --save`)"
            )
        return (
            f"waive it ({waive}) if the host's {name} works anyway, or use a native build made "
            f"against the host's {name} {host.version or ''}".rstrip()
        )
    return (
        f"waive it ({waive}) if the native wheel works without it; protect it ([host] "
        f"protected) if the host should provide it; or add an index or wheelhouse that has it "
        "(--extra-index-url, --find-links)"
    )


def unmet_error(problems: Sequence[Problem], request: LockRequest) -> ConflictError:
    """One error for every requirement a lock could not meet, each problem with its fix."""
    names = ", ".join(dict.fromkeys(p.path or "?" for p in problems))
    return ConflictError(
        f"cannot lock for {request.target.describe()}: {len(problems)} requirements cannot be "
        f"met ({names})",
        problems=problems,
        hint="each line says its fix; fix them all, then lock again",
    )


def _native_wants(provider: Provider) -> list[tuple[NormalizedName, SpecifierSet]]:
    reqs, _ = provider.requirements_of(provider.native_candidate())
    provider.note_extras(reqs)
    return [(r.name, r.specifier) for r in reqs if not provider.is_protected(r.name)]


def _collect(
    result: Any,
    provider: Provider,
    universe: Universe,
    request: LockRequest,
    waived_roots: list[tuple[str, str]],
) -> Resolution:
    mapping: Mapping[str, Candidate] = result.mapping
    criteria: Mapping[str, Any] = result.criteria
    graph = result.graph
    extras: dict[str, set[str]] = defaultdict(set)
    for cand in mapping.values():
        extras[cand.name].update(cand.extras)
    incoming: dict[str, list[tuple[Req, Candidate | None]]] = defaultdict(list)
    for ident, criterion in criteria.items():
        name, _ = split_identifier(ident)
        for info in criterion.information:
            incoming[name].append((info.requirement, info.parent))
    children: dict[str, set[NormalizedName]] = defaultdict(set)
    for ident in mapping:
        name, _ = split_identifier(ident)
        for child in graph.iter_children(ident):
            child_name, _ = split_identifier(child)
            if child_name != name:
                children[name].add(child_name)

    index_cands = sorted(
        (c for c in mapping.values() if c.origin == "index" and not c.extras),
        key=lambda c: c.name,
    )
    for cand in index_cands:
        if provider.is_protected(cand.name):
            raise ConflictError(f"internal: protected {cand.name} chosen from the index")
    wheels = universe.complete([c.wheel for c in index_cands if c.wheel is not None])
    locked_names = {c.name for c in index_cands}
    packages = []
    for cand, wheel in zip(index_cands, wheels, strict=True):
        meta = universe.metadata(wheel)
        packages.append(
            LockedPackage(
                name=cand.name,
                version=wheel.version,
                wheel=wheel,
                requires=tuple(meta.requires),
                extras=tuple(sorted(extras[cand.name])),
                marker=_package_marker(incoming[cand.name]),
                dependencies=tuple(sorted(children[cand.name] & locked_names)),
                requires_python=meta.requires_python,
            )
        )

    assumptions: set[Assumption] = set()
    shadows: list[HostShadow] = []
    for cand in mapping.values():
        if cand.origin == "host" and cand.version is None:
            for req, parent in incoming[cand.name]:
                if req.pin is not None:
                    continue
                by = parent.label() if parent is not None else (req.origin or "the lock request")
                assumptions.add(Assumption(cand.name, req.text, by))
    for cand in index_cands:
        host = provider.host_candidate(cand.name)
        if host is not None:
            shadows.append(HostShadow(cand.name, str(host.version or "unknown"), str(cand.version)))

    dropped: dict[str, set[str]] = defaultdict(set)
    for key, text in waived_roots:
        dropped[key].add(text)
    for cand in mapping.values():
        _, waived = provider.requirements_of(cand)
        for key, text in waived:
            dropped[key].add(text)
    waivers = tuple(
        WaiverUse(name, reason, tuple(sorted(dropped.get(name_key(name), ()))))
        for name, reason in sorted(request.waivers.items())
    )
    return Resolution(
        packages=tuple(packages),
        assumptions=tuple(
            sorted(assumptions, key=lambda a: (a.name, a.requirement, a.required_by))
        ),
        shadows=tuple(shadows),
        waivers=waivers,
        host_used=tuple(
            sorted(
                {
                    (c.name, str(c.version) if c.version is not None else None)
                    for c in mapping.values()
                    if c.origin == "host" and not c.extras
                },
                key=lambda item: item[0],
            )
        ),
        native_dependencies=tuple(
            sorted(children[provider.native_candidate().name] & locked_names)
        ),
    )


def _package_marker(edges: Sequence[tuple[Req, Candidate | None]]) -> str | None:
    """The OR of the markers of the edges that bring a package in, when all have one and none
    depends on extras; otherwise no marker (always installed)."""
    markers: set[str] = set()
    for req, _ in edges:
        if req.pin is not None:
            continue
        if req.marker is None or "extra" in req.marker:
            return None
        markers.add(req.marker)
    if not markers:
        return None
    ordered = sorted(markers)
    if len(ordered) == 1:
        return ordered[0]
    return " or ".join(f"({m})" for m in ordered)


# conflicts ---------------------------------------------------------------------------------
def explain_conflict(
    causes: Iterable[Any], provider: Provider, universe: Universe, request: LockRequest
) -> ConflictError:
    by_name: dict[str, list[tuple[Req, Candidate | None]]] = defaultdict(list)
    for cause in causes:
        req: Req = cause.requirement
        parent: Candidate | None = cause.parent
        pair = (req, parent)
        if pair not in by_name[req.name]:
            by_name[req.name].append(pair)
    sentences: list[str] = []
    problems: list[Problem] = []
    protected_hit = False
    for name in sorted(by_name):
        pairs = by_name[name]
        wants = "; ".join(
            f"{_who(parent, req)} requires {req.text}" for req, parent in sorted(pairs, key=_key)
        )
        reason = _why_not(NormalizedName(name), [r for r, _ in pairs], provider, universe)
        protected_hit = protected_hit or provider.is_protected(name)
        sentences.append(f"{wants}; {reason}")
        problems.append(Problem(f"{wants}; {reason}", path=name))
    if protected_hit:
        hint = (
            "ways out: waive the requirement in the profile ([[host.waivers]] with a reason) if "
            "the host's version works anyway; use a native build made against the host's "
            "version; or choose a profile whose host provides what the native wheel needs"
        )
    else:
        hint = (
            "ways out: relax the conflicting --constraint/--prefer pins; waive the requirement in "
            "the profile ([[host.waivers]]); add an index or wheelhouse with a fitting wheel "
            "(--extra-index-url, --find-links); or choose another native build or profile"
        )
    message = "cannot lock for " + request.target.describe() + ": " + " / ".join(sentences)
    return ConflictError(message, problems=problems, hint=hint)


def _key(pair: tuple[Req, Candidate | None]) -> tuple[str, str]:
    req, parent = pair
    return (_who(parent, req), req.text)


def _who(parent: Candidate | None, req: Req) -> str:
    if parent is not None:
        return parent.label()
    return req.origin or "the lock request"


def _why_not(name: NormalizedName, reqs: list[Req], provider: Provider, universe: Universe) -> str:
    host = provider.host_candidate(name)
    if name == provider.native.name:
        return f"the native wheel is {name} {provider.native.version}"
    if provider.is_protected(name):
        if host is None:
            return f"{name} is protected and the host snapshot does not list it"
        version = host.version if host.version is not None else "(version unknown)"
        return f"the host provides {name} {version}, which is protected"
    parts = []
    if host is not None:
        parts.append(f"the host provides {name} {host.version or '(version unknown)'}")
    versions = [str(w.version) for w in universe.versions(name)]
    target = provider.target.describe()
    if not versions:
        seen = list(universe.seen_versions(name))
        if seen:
            shown = ", ".join(seen[:12]) + (" ..." if len(seen) > 12 else "")
            parts.append(f"no wheel of {name} installs on {target} (versions tried: {shown})")
        else:
            parts.append(f"no source lists {name}")
    else:
        shown = ", ".join(versions[:12]) + (" ..." if len(versions) > 12 else "")
        constraint = provider.policy.constraints.get(name)
        extra = f" within the constraint {constraint}" if constraint else ""
        parts.append(
            f"no version with a wheel for {target} satisfies all of them{extra} "
            f"(versions tried: {shown})"
        )
    return "; ".join(parts)
