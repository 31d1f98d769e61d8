"""The resolver's records (pure): requirements, candidates, and the universe they come from.

A candidate is the native wheel, a host distribution (version possibly unknown) or an index
wheel; a candidate with extras stands for ``name[extras]`` and depends on its base candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import attrs
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

if TYPE_CHECKING:  # types only: `kvenv plan` and `lock --check` import this module for name_key
    from kvenv.lock.finder import WheelFile
    from kvenv.lock.metadata import DistMetadata

Origin = Literal["native", "host", "index"]


def name_key(name: str) -> str:
    """A name compared for protection: canonical, with stray separators stripped, so ``Torch``,
    ``torch_`` and ``torch.`` are all ``torch``."""
    return canonicalize_name(name).strip("-")


def identifier(name: str, extras: Iterable[str]) -> str:
    extras = sorted(set(extras))
    return f"{name}[{','.join(extras)}]" if extras else name


def split_identifier(ident: str) -> tuple[NormalizedName, frozenset[str]]:
    name, _, rest = ident.partition("[")
    extras = frozenset(e for e in rest.rstrip("]").split(",") if e)
    return NormalizedName(name), extras


@attrs.frozen
class Candidate:
    name: NormalizedName
    version: Version | None
    origin: Origin
    extras: frozenset[str] = frozenset()
    wheel: WheelFile | None = attrs.field(default=None, eq=False)
    host_requires: tuple[str, ...] | None = attrs.field(default=None, eq=False)

    @property
    def ident(self) -> str:
        return identifier(self.name, self.extras)

    def base(self) -> Candidate:
        return attrs.evolve(self, extras=frozenset())

    def label(self) -> str:
        if self.version is None:
            return f"{self.name} (on the host, version unknown)"
        where = " (on the host)" if self.origin == "host" else ""
        return f"{self.name} {self.version}{where}"


@attrs.frozen
class Req:
    """A requirement whose marker already holds for the target."""

    name: NormalizedName
    extras: frozenset[str]
    specifier: SpecifierSet
    text: str  # name[extras]specifier, for messages
    marker: str | None = None
    pin: Candidate | None = None
    origin: str | None = None  # where a root requirement came from

    @property
    def ident(self) -> str:
        return identifier(self.name, self.extras)

    @classmethod
    def from_requirement(cls, req: Requirement, *, origin: str | None = None) -> Req:
        extras = frozenset(canonicalize_name(e) for e in req.extras)
        name = canonicalize_name(req.name)
        text = identifier(name, extras) + str(req.specifier)
        marker = str(req.marker) if req.marker is not None else None
        return cls(name, extras, req.specifier, text, marker, None, origin)

    @classmethod
    def pinned(cls, candidate: Candidate) -> Req:
        version = f"=={candidate.version}" if candidate.version is not None else ""
        spec = SpecifierSet(version)
        return cls(candidate.name, frozenset(), spec, f"{candidate.name}{version}", pin=candidate)


class Universe(Protocol):
    """Where index candidates and their metadata come from (a finder, or a fake in tests)."""

    def versions(self, name: NormalizedName) -> Sequence[WheelFile]:
        """The best target wheel of each version, newest first."""
        ...

    def seen_versions(self, name: NormalizedName) -> Sequence[str]:
        """Every version the sources list for ``name``, with or without a target wheel."""
        ...

    def metadata(self, wheel: WheelFile) -> DistMetadata: ...

    def prefetch(self, wanted: Sequence[tuple[NormalizedName, SpecifierSet]]) -> None: ...

    def complete(self, wheels: Sequence[WheelFile]) -> list[WheelFile]:
        """The same wheels with sha256 and size filled in."""
        ...


@runtime_checkable
class Following(Protocol):
    """A universe that prefetches ahead of the resolver, following the metadata it fetched:
    ``wanted_by(metadata)`` names the requirements worth prefetching next."""

    def follow(
        self, wanted_by: Callable[[DistMetadata], list[tuple[NormalizedName, SpecifierSet]]]
    ) -> None: ...
