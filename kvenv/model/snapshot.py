"""The host snapshot model: what a machine provides, as ``kvenv fingerprint --save`` writes it
and as a profile's ``host.snapshot`` names it: the records and their JSON file (read, written
atomically); probing lives in ``kvenv.probe``.

A distribution whose ``version`` is null is *present with an unknown version* (partial host
knowledge): the resolver accepts it for any specifier and records the assumption in the lock,
and ``kvenv doctor`` on the real host checks it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import attrs
from packaging.utils import canonicalize_name

from kvenv._util import atomic
from kvenv._util.jsonio import read_json
from kvenv.errors import InputError
from kvenv.model import convert, formats
from kvenv.model.fields import NonEmpty, PackageName, Pep440Version


@attrs.frozen
class Distribution:
    name: PackageName
    version: Pep440Version | None = None
    requires: list[str] | None = None  # Requires-Dist lines; null when unknown
    location: str | None = None
    note: str | None = None  # why the entry is here (e.g. where an unknown version came from)


@attrs.frozen
class PythonInfo:
    version: NonEmpty  # full version, e.g. 3.12.13
    implementation: NonEmpty = NonEmpty("cpython")
    abi: str | None = None
    tags: list[str] = attrs.field(factory=list)  # ordered, most specific first
    executable: str | None = None
    sys_path: list[str] = attrs.field(factory=list)


@attrs.frozen
class PlatformInfo:
    os: NonEmpty  # sys_platform: linux, darwin, win32
    machine: NonEmpty
    libc: Literal["glibc", "musl"] | None = None
    libc_version: str | None = None
    kernel: str | None = None


@attrs.frozen
class TorchInfo:
    version: str | None = None
    cuda: str | None = None
    location: str | None = None
    cuda_available: bool | None = None
    device_count: int | None = None
    nccl: str | None = None


@attrs.frozen
class GpuInfo:
    index: int
    name: str
    compute_capability: str | None = None
    memory_mib: int | None = None


@attrs.frozen
class DriverInfo:
    version: str | None = None
    cuda_max: str | None = None
    source: str | None = None


@attrs.frozen
class CudaInfo:
    home: str | None = None
    toolkit_version: str | None = None
    nvcc: str | None = None
    libcuda: str | None = None
    library_dirs: list[str] = attrs.field(factory=list)


@attrs.frozen
class CpuInfo:
    """The CPU as the kernel reports it (``/proc/cpuinfo``): its model, the x86-64 psABI level
    its flags reach (x86-64 only) and the instruction-set features kvenv tracks
    (:mod:`kvenv.model.cpuisa`), in the kernel's spelling."""

    arch: NonEmpty
    model: str | None = None
    level: str | None = None
    features: list[str] = attrs.field(factory=list)


@attrs.frozen
class LibraryInfo:
    """The shared libraries (by file name, as a ``DT_NEEDED`` entry names them) the host
    provides: ``system``, what the dynamic loader's cache lists (``ldconfig -p``); ``packages``,
    those installed by torch and the ``nvidia-*`` distributions, per distribution."""

    system: list[str] | None = None
    packages: dict[str, list[str]] = attrs.field(factory=dict)

    def provides(self, soname: str) -> str | None:
        """Who provides ``soname`` (``system`` or a distribution's name), or None."""
        for name, files in self.packages.items():
            if soname in files:
                return name
        if self.system is not None and soname in self.system:
            return "system"
        return None


@attrs.frozen
class HostSnapshot:
    schema: Literal[1]
    python: PythonInfo
    platform: PlatformInfo
    distributions: list[Distribution] = attrs.field(factory=list)
    torch: TorchInfo | None = None
    driver: DriverInfo | None = None
    gpus: list[GpuInfo] = attrs.field(factory=list)
    cuda: CudaInfo | None = None
    # Recorded since issue 24; older snapshots lack them (None: not known, never "none").
    cpu: CpuInfo | None = None
    libraries: LibraryInfo | None = None
    is_kaggle: bool = False
    taken_at: str | None = None
    source: Literal["probe", "recorded"] = "probe"
    notes: list[str] = attrs.field(factory=list)
    # The kvenv that wrote it, where a writer records it (kvenv 0.2 does not: snapshots are
    # reproducible); never part of the snapshot's digest.
    kvenv_version: str | None = None

    def find(self, name: str) -> Distribution | None:
        wanted = canonicalize_name(name)
        for dist in self.distributions:
            if canonicalize_name(dist.name) == wanted:
                return dist
        return None


def snapshot_from_dict(data: Any, *, file: str | None = None) -> HostSnapshot:
    """A snapshot from its JSON data: a newer format is refused, keys this kvenv does not know
    are ignored (:mod:`kvenv.model.formats`)."""
    formats.newer_format(
        data, reads_up_to=formats.SNAPSHOT_FORMAT, file=file or "<input>", what="host snapshot"
    )
    return convert.structure(data, HostSnapshot, file=file, what="host snapshot", lenient=True)


def snapshot_to_dict(snapshot: HostSnapshot) -> dict[str, Any]:
    data: dict[str, Any] = convert.unstructure(snapshot)
    return data


def read_snapshot(path: Path) -> HostSnapshot:
    data = read_json(
        path,
        what="host snapshot",
        missing_hint="create one with `kvenv fingerprint --save PATH` on the host",
    )
    return snapshot_from_dict(data, file=str(path))


def dumps_snapshot(snapshot: HostSnapshot) -> str:
    """The snapshot's JSON text. It does not name the kvenv that writes it: a snapshot made
    again from the same facts is the same bytes whichever kvenv makes it (committed snapshots
    are regenerated byte for byte: docs/hosts.md); ``kvenv_version`` is read when present (a
    newer format names its writer there: docs/compatibility.md)."""
    return json.dumps(snapshot_to_dict(snapshot), indent=2, sort_keys=True) + "\n"


def write_snapshot(path: Path, snapshot: HostSnapshot, *, exclusive: bool = False) -> None:
    """Write ``snapshot`` to ``path`` atomically. ``exclusive`` refuses an existing file with
    ``FileExistsError``; any other failure is an :class:`InputError`."""
    try:
        atomic.write_text(path, dumps_snapshot(snapshot), exclusive=exclusive)
    except OSError as exc:
        if exclusive and isinstance(exc, FileExistsError):
            raise
        raise InputError(f"cannot write the snapshot to {path}: {exc.strerror or exc}") from None


def snapshot_digest(snapshot: HostSnapshot) -> str:
    """The digest a lock records of its host snapshot: of the host's facts, whichever kvenv
    took them (``kvenv_version`` left out)."""
    facts = snapshot_to_dict(snapshot)
    facts.pop("kvenv_version", None)
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
