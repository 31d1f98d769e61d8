"""The profile model: a hardware/software target, the host's protected packages, a pinned
native wheel, the overlay lock and runtime defaults. Frozen attrs records, pure.

Reading files, ``extends`` and discovery live in :mod:`kvenv.model.loading`; conversion in
:mod:`kvenv.model.convert`.
"""

from __future__ import annotations

from typing import Literal

import attrs

from kvenv.model.fields import (
    DottedVersion,
    EnvName,
    Fraction,
    HfRepo,
    HttpsUrl,
    NonEmpty,
    PackageName,
    Pep440Version,
    PositiveInt,
    ProfileName,
    PythonVersion,
    RelPath,
    Revision,
    RootPath,
    Sha256,
    WheelFilename,
)

PURE_ABI = "none"  # target.abi for a pure-Python target: any CPython >= target.python
DEFAULT_PROTECTED: tuple[str, ...] = ("torch", "torchvision", "torchaudio")

Implementation = Literal["cpython", "pypy"]
Dtype = Literal["auto", "float16", "half", "bfloat16", "float", "float32"]


@attrs.frozen
class Gpu:
    """The accelerators the target has (all alike)."""

    model: NonEmpty
    count: PositiveInt
    compute_capability: DottedVersion | None = None
    memory_mib: PositiveInt | None = None


@attrs.frozen
class Target:
    """The machine the overlay is for, which need not be the machine kvenv runs on.

    ``abi = "none"`` declares a pure-Python target: every wheel must be ``*-none-any``,
    ``python`` is the minimum version (markers are evaluated at it), and any interpreter
    ABI, OS and machine of that implementation qualifies.
    """

    python: PythonVersion
    abi: NonEmpty
    implementation: Implementation = "cpython"
    os: Literal["linux", "darwin", "windows"] = "linux"
    machine: NonEmpty = NonEmpty("x86_64")
    glibc: DottedVersion | None = None
    platforms: list[NonEmpty] | None = None
    gpu: Gpu | None = None
    driver_min: DottedVersion | None = None
    cuda: DottedVersion | None = None

    @property
    def pure(self) -> bool:
        """Whether this is a pure-Python target (``abi = "none"``)."""
        return self.abi == PURE_ABI

    @property
    def python_version(self) -> str:
        """``major.minor``, as the ``python_version`` marker has it."""
        return ".".join(self.python.split(".")[:2])


@attrs.frozen
class Waiver:
    """A requirement the host is known to lack or provide otherwise, dropped with a reason."""

    name: PackageName
    reason: NonEmpty


@attrs.frozen
class Host:
    """What the machine already provides and what may never be written or shadowed."""

    snapshot: RelPath | None = None
    protected: list[PackageName] = attrs.field(factory=lambda: list(DEFAULT_PROTECTED))
    waivers: list[Waiver] = attrs.field(factory=list)


@attrs.frozen
class HfSource:
    """A file in a Hugging Face repository at an immutable revision."""

    repo: HfRepo
    revision: Revision
    filename: WheelFilename
    kind: Literal["hf"] = "hf"
    repo_type: Literal["model", "dataset"] = "model"


@attrs.frozen
class UrlSource:
    kind: Literal["url"]
    url: HttpsUrl


@attrs.frozen
class PathSource:
    """A wheel file inside the project (relative to the project directory)."""

    kind: Literal["path"]
    path: RelPath


@attrs.frozen
class IndexSource:
    """A wheel found on the package index (or a wheelhouse) by name, version and sha256."""

    kind: Literal["index"]
    index_url: HttpsUrl | None = None
    filename: WheelFilename | None = None


Source = HfSource | UrlSource | PathSource | IndexSource


@attrs.frozen
class Native:
    """The pinned native wheel: what it is and exactly which bytes."""

    name: PackageName
    version: Pep440Version
    sha256: Sha256
    source: Source
    size: PositiveInt | None = None


@attrs.frozen
class Overlay:
    """The overlay lock, and the wheels whose RECORD may lie about hashes and sizes.

    A wheel named in ``record_waivers`` is installed even where its RECORD's hash or size of a
    file differs from the file's bytes (an upstream packaging defect): the installed RECORD
    then lists the actual digests and the manifest records each waived mismatch. Structural
    defects (files missing from RECORD, absent files listed, bad rows) are never waived.
    """

    lock: RelPath | None = None
    record_waivers: list[Waiver] = attrs.field(factory=list)


@attrs.frozen
class Paths:
    root: RootPath | None = None
    cache: RootPath | None = None


@attrs.frozen
class Runtime:
    """Defaults for the vLLM wrapper and ``kvenv serve``; every one can be overridden."""

    dtype: Dtype | None = None
    enforce_eager: bool | None = None
    disable_custom_all_reduce: bool | None = None
    tensor_parallel_size: PositiveInt | None = None
    max_model_len: PositiveInt | None = None
    gpu_memory_utilization: Fraction | None = None
    attention_backend: NonEmpty | None = None
    env: dict[EnvName, str] = attrs.field(factory=dict)


@attrs.frozen
class Profile:
    schema: Literal[1]
    name: ProfileName
    description: str = ""
    extends: NonEmpty | None = None
    target: Target | None = None
    host: Host = attrs.field(factory=Host)
    native: Native | None = None
    overlay: Overlay = attrs.field(factory=Overlay)
    paths: Paths = attrs.field(factory=Paths)
    runtime: Runtime = attrs.field(factory=Runtime)

    @property
    def lock_relpath(self) -> str:
        return self.overlay.lock or f"locks/pylock.{self.name}.toml"
