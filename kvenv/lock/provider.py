"""The resolvelib provider: host-aware, cross-target candidate choice (pure over a Universe).

- Protected names have exactly one candidate, the host's; their own requirements belong to the
  host and are not followed.
- A host distribution is preferred whenever it satisfies; one with an unknown version
  satisfies every specifier (an *assumption*, recorded in the lock).
- Index candidates come newest first, a preferred pin (``--prefer``, the previous lock) first
  of all; ``--constraint`` specifiers bound them.
- Markers are evaluated for the target with the candidate's extras; waived names are dropped.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version
from resolvelib import AbstractProvider

from kvenv._util.redact import redact_url
from kvenv.errors import InputError
from kvenv.lock.candidates import Candidate, Req, Universe, name_key, split_identifier
from kvenv.model.snapshot import HostSnapshot
from kvenv.model.target import TargetEnv

if TYPE_CHECKING:
    from kvenv.lock.metadata import DistMetadata


@attrs.frozen
class NativeWheel:
    """The native wheel as the resolver sees it: its name, version and Requires-Dist lines."""

    name: NormalizedName
    version: Version
    requires: tuple[str, ...]


@attrs.frozen
class Policy:
    """What shapes the choice besides the requirements themselves."""

    protected: frozenset[str] = frozenset()  # name keys
    waived: frozenset[str] = frozenset()  # name keys
    prefer: Mapping[NormalizedName, Version] = attrs.field(factory=dict)
    constraints: Mapping[NormalizedName, SpecifierSet] = attrs.field(factory=dict)


def parse_requirement(line: str, *, owner: str) -> Requirement:
    try:
        return _requirement(line)
    except InvalidRequirement as exc:
        raise InputError(f"{owner} has an invalid requirement {line!r}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _requirement(line: str) -> Requirement:
    """One parse per distinct line: the resolver asks for a candidate's requirements each time
    it pins or backtracks over it, and packaging's parser is the larger share of that
    (issue 13). Callers treat the result as read-only."""
    return Requirement(line)


class Provider(AbstractProvider[Req, Candidate, str]):
    """The resolvelib provider."""

    def __init__(
        self,
        *,
        target: TargetEnv,
        universe: Universe,
        host: HostSnapshot | None,
        native: NativeWheel,
        policy: Policy,
    ) -> None:
        self.target = target
        self.universe = universe
        self.host = host
        self.native = native
        self.policy = policy
        self._usable: dict[str, bool] = {}
        self._host: dict[NormalizedName, Candidate | None] = {}
        self._on_host: dict[NormalizedName, bool] = {}
        self._contains: dict[tuple[int, Version], bool] = {}
        self._specs: dict[int, SpecifierSet] = {}
        self._extras: dict[NormalizedName, set[str]] = {}  # asked of each name (prefetch)
        self._extras_lock = threading.Lock()
        self._pinning: dict[int, tuple[Req, bool]] = {}
        self._names: dict[str, NormalizedName] = {}

    # helpers -------------------------------------------------------------------------------
    def host_candidate(self, name: NormalizedName) -> Candidate | None:
        """The host's distribution of ``name`` as a candidate (looked up once per name: the
        resolver asks for every preference and match)."""
        if name in self._host:
            return self._host[name]
        found: Candidate | None = None
        dist = self.host.find(name) if self.host is not None else None
        if dist is not None:
            version = Version(dist.version) if dist.version is not None else None
            requires = tuple(dist.requires) if dist.requires is not None else None
            found = Candidate(name, version, "host", host_requires=requires)
        self._host[name] = found
        return found

    def native_candidate(self) -> Candidate:
        return Candidate(self.native.name, self.native.version, "native")

    def is_protected(self, name: str) -> bool:
        return name_key(name) in self.policy.protected

    def raw_requires(self, candidate: Candidate) -> tuple[str, ...]:
        """The Requires-Dist lines of a candidate (before markers)."""
        if candidate.origin == "native":
            return self.native.requires
        if candidate.origin == "host":
            if self.is_protected(candidate.name) or candidate.host_requires is None:
                return ()
            return candidate.host_requires
        assert candidate.wheel is not None
        return self.universe.metadata(candidate.wheel).requires

    def requirements_of(self, candidate: Candidate) -> tuple[list[Req], list[tuple[str, str]]]:
        """The target's requirements of ``candidate``, and the waived ones as (name key, text)."""
        out: list[Req] = []
        waived: list[tuple[str, str]] = []
        owner = candidate.label()
        for line in self.raw_requires(candidate):
            req = parse_requirement(line, owner=owner)
            if not self.target.evaluate(req.marker, candidate.extras):
                continue
            if req.url:
                raise InputError(
                    f"{owner} requires {req.name} from a direct URL ({redact_url(req.url)}), "
                    "which kvenv does not lock",
                    hint="publish the wheel to an index or a wheelhouse and pin it by name",
                )
            if name_key(req.name) in self.policy.waived:
                waived.append((name_key(req.name), f"{line} (required by {owner})"))
                continue
            out.append(Req.from_requirement(req))
        return out, waived

    # the resolvelib protocol ---------------------------------------------------------------
    def identify(self, requirement_or_candidate: Req | Candidate) -> str:
        return requirement_or_candidate.ident

    def get_preference(
        self,
        identifier: str,
        resolutions: Mapping[str, Candidate],
        candidates: Mapping[str, Iterator[Candidate]],
        information: Mapping[str, Iterator[Any]],
        backtrack_causes: Sequence[Any],
    ) -> Any:
        pinned = any(self._pins(i.requirement) for i in information[identifier])
        causes = {c.requirement.name for c in backtrack_causes}
        name = self._names.get(identifier)
        if name is None:
            name = self._names[identifier] = split_identifier(identifier)[0]
        on_host = self._on_host.get(name)
        if on_host is None:
            on_host = self._on_host[name] = (
                self.host is not None and self.host.find(name) is not None
            )
        return (not pinned, name not in causes, not on_host, identifier)

    def _pins(self, req: Req) -> bool:
        """Whether ``req`` pins one version (asked for every open name in every round)."""
        known = self._pinning.get(id(req))
        if known is None or known[0] is not req:
            pins = req.pin is not None or any(s.operator in ("==", "===") for s in req.specifier)
            known = self._pinning[id(req)] = (req, pins)  # held: its id is not reused
        return known[1]

    def find_matches(
        self,
        identifier: str,
        requirements: Mapping[str, Iterator[Req]],
        incompatibilities: Mapping[str, Iterator[Candidate]],
    ) -> Callable[[], Iterator[Candidate]]:
        name, extras = split_identifier(identifier)
        reqs = list(requirements.get(identifier, ()))
        bad = set(incompatibilities.get(identifier, ()))

        def generate() -> Iterator[Candidate]:
            for candidate in self._ordered(name, extras, reqs):
                if candidate in bad:
                    continue
                if all(self.is_satisfied_by(r, candidate) for r in reqs):
                    yield candidate

        return generate

    def _ordered(
        self, name: NormalizedName, extras: frozenset[str], reqs: list[Req]
    ) -> Iterator[Candidate]:
        pins = [r.pin for r in reqs if r.pin is not None]
        if pins:
            yield attrs.evolve(pins[0], extras=extras)
            return
        if name == self.native.name:
            yield attrs.evolve(self.native_candidate(), extras=extras)
            return
        host = self.host_candidate(name)
        if host is not None:
            yield attrs.evolve(host, extras=extras)
        if self.is_protected(name):
            return
        yield from self._index_candidates(name, extras, reqs)

    def _index_candidates(
        self, name: NormalizedName, extras: frozenset[str], reqs: list[Req]
    ) -> Iterator[Candidate]:
        by_version = {w.version: w for w in self.universe.versions(name)}
        combined = SpecifierSet()
        for req in reqs:
            combined &= req.specifier
        constraint = self.policy.constraints.get(name)
        if constraint is not None:
            combined &= constraint
        allowed = list(combined.filter(by_version))
        preferred = self.policy.prefer.get(name)
        if preferred in by_version and preferred in allowed:
            allowed.remove(preferred)
            allowed.insert(0, preferred)
        for version in allowed:
            wheel = by_version[version]
            if self._fits_python(wheel):
                yield Candidate(name, version, "index", extras, wheel=wheel)

    def _fits_python(self, wheel: Any) -> bool:
        key = wheel.url
        if key not in self._usable:
            meta = self.universe.metadata(wheel)
            ok = True
            if meta.requires_python:
                try:
                    spec = SpecifierSet(meta.requires_python)
                    ok = spec.contains(self.target.python_full_version, prereleases=True)
                except InvalidSpecifier:
                    ok = False
            self._usable[key] = ok
        return self._usable[key]

    def is_satisfied_by(self, requirement: Req, candidate: Candidate) -> bool:
        if requirement.pin is not None:
            return candidate.base() == requirement.pin.base()
        if candidate.name != requirement.name:
            return False
        if candidate.version is None:
            return True  # present on the host, version unknown: an assumption
        spec = requirement.specifier
        key = (id(spec), candidate.version)
        hit = self._contains.get(key)
        if hit is None:
            # resolvelib re-checks every pin against every criterion each round; a specifier
            # object is shared by every requirement parsed from the same line (issue 13)
            self._specs[id(spec)] = spec  # held, so its id is not reused while memoized
            hit = self._contains[key] = spec.contains(candidate.version, prereleases=True)
        return hit

    def note_extras(self, reqs: Iterable[Req]) -> None:
        """Remember the extras asked of each name, so :meth:`wanted_by` follows them too."""
        with self._extras_lock:
            for req in reqs:
                if req.extras:
                    self._extras.setdefault(req.name, set()).update(req.extras)

    def wanted_by(self, meta: DistMetadata) -> list[tuple[NormalizedName, SpecifierSet]]:
        """What an index wheel's metadata makes worth prefetching: its requirements that hold
        on the target with the extras asked of it so far, less direct URLs, waived, protected
        and native names (a guess for the prefetcher; the resolver decides on its own).
        Called from the prefetcher's threads."""
        name = canonicalize_name(meta.name)
        with self._extras_lock:
            extras = frozenset(self._extras.get(name, ()))
        out: list[tuple[NormalizedName, SpecifierSet]] = []
        asked: list[Req] = []
        for line in meta.requires:
            try:
                req = _requirement(line)
            except InvalidRequirement:
                continue
            if req.url or not self.target.evaluate(req.marker, extras):
                continue
            dep = canonicalize_name(req.name)
            key = name_key(dep)
            if key in self.policy.waived or key in self.policy.protected:
                continue
            if dep != self.native.name:
                out.append((dep, req.specifier))
                if req.extras:
                    asked.append(Req.from_requirement(req))
        self.note_extras(asked)  # before the caller fetches them, so their extras are seen
        return out

    def get_dependencies(self, candidate: Candidate) -> Iterable[Req]:
        reqs, _ = self.requirements_of(candidate)
        deps: list[Req] = []
        if candidate.extras:
            deps.append(Req.pinned(candidate.base()))
        deps.extend(sorted(set(reqs), key=lambda r: (r.ident, r.text, r.marker or "")))
        wanted = [
            (r.name, r.specifier)
            for r in reqs
            if not self.is_protected(r.name) and r.name != self.native.name
        ]
        self.note_extras(reqs)
        if wanted:
            self.universe.prefetch(wanted)
        return deps


def constraint_map(requirements: Iterable[Requirement]) -> dict[NormalizedName, SpecifierSet]:
    out: dict[NormalizedName, SpecifierSet] = {}
    for req in requirements:
        name = canonicalize_name(req.name)
        out[name] = out.get(name, SpecifierSet()) & req.specifier
    return out


def prefer_map(requirements: Iterable[Requirement]) -> dict[NormalizedName, Version]:
    out: dict[NormalizedName, Version] = {}
    for req in requirements:
        pins = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if pins:
            try:
                out[canonicalize_name(req.name)] = Version(pins[0].version)
            except InvalidVersion:
                continue
    return out
