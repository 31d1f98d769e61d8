"""The profile model: a hardware/software target, the host's protected packages, a pinned
native wheel, the overlay lock and runtime defaults. Frozen attrs records, pure.

Reading files, ``extends`` and discovery live in :mod:`kvenv.model.loading`; conversion in
:mod:`kvenv.model.convert`.
"""

from __future__ import annotations

from typing import Literal

import attrs

from kvenv.model.cpuisa import ARCHES, X86_FEATURES, CpuFeature, X86Level
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
    Requirement508,
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
class TargetCpu:
    """The instruction-set features the native wheel's code needs (``[target.cpu]``): an x86-64
    psABI ``level`` (x86_64 targets) and named ``features`` (the kernel's names, as
    ``/proc/cpuinfo`` lists them); the architecture itself is ``target.machine``."""

    level: X86Level | None = None
    features: list[CpuFeature] = attrs.field(factory=list)


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
    cpu: TargetCpu | None = None

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
    # The host interpreter (e.g. "/usr/bin/python3"); a relative path is resolved against the
    # profile's project, as ``snapshot`` is. See kvenv.probe.interpreter for the full order.
    python: NonEmpty | None = None
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
    # Libraries (file names, as DT_NEEDED names them) its shared objects need that something
    # kvenv does not see provides: an overlay wheel, a directory on LD_LIBRARY_PATH.
    provided_libs: list[NonEmpty] | None = None


@attrs.frozen
class Overlay:
    """The overlay lock, and the wheels whose RECORD may lie about hashes and sizes.

    A wheel named in ``record_waivers`` is installed even where its RECORD's hash or size of a
    file differs from the file's bytes (an upstream packaging defect): the installed RECORD
    then lists the actual digests and the manifest records each waived mismatch. Structural
    defects (files missing from RECORD, absent files listed, bad rows) are never waived.

    A wheel that ships a ``.pth`` file with a line ``site`` executes at every interpreter start
    (``import ...``) is installed only when ``allow_pth`` names it, with a reason.

    ``requires`` are the overlay's own top-level requirements beside the native wheel's (PEP
    508: extras and markers allowed), ``constraints`` version bounds applied whenever a package
    is needed (they add nothing): the profile declares what shapes its lock (``kvenv add`` and
    ``kvenv remove`` edit ``requires``).
    """

    lock: RelPath | None = None
    requires: list[Requirement508] = attrs.field(factory=list)
    constraints: list[Requirement508] = attrs.field(factory=list)
    record_waivers: list[Waiver] = attrs.field(factory=list)
    # wheels allowed to ship a .pth line that Python executes at every start (``import ...``)
    allow_pth: list[Waiver] = attrs.field(factory=list)


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
    # Loader-changing names (LOADER_ENV) allowed in ``env``, each with the reason it is needed.
    allow_env: dict[EnvName, NonEmpty] = attrs.field(factory=dict)


# Environment names that change how a process loads code: the dynamic loader, an interpreter's
# start-up (Python, shells, Perl, Ruby, Node, Java). Activation exports ``[runtime.env]`` into
# the user's shell, so such a name is refused unless ``[runtime.allow_env]`` gives a reason.
LOADER_ENV = frozenset(
    {
        "LD_PRELOAD", "LD_AUDIT", "LD_DEBUG_OUTPUT", "LD_PROFILE", "LD_ORIGIN_PATH",
        "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "DYLD_FRAMEWORK_PATH",
        "DYLD_FALLBACK_LIBRARY_PATH", "GCONV_PATH", "LOCPATH",
        "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
        "PYTHONPLATLIBDIR", "PYTHONBREAKPOINT", "PYTHONWARNINGS",
        "BASH_ENV", "ENV", "ZDOTDIR", "PROMPT_COMMAND", "SHELLOPTS", "BASHOPTS", "IFS", "PS4",
        "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
        "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
    }
)  # fmt: skip
LOADER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")
# Names activation itself sets: a profile value would replace what kvenv computed.
# (kvenv.env.activation sets KVENV_MANIFEST and KVENV_ACTIVE_GENERATION.)
KVENV_SETS = frozenset(
    {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "KVENV_MANIFEST", "KVENV_ACTIVE_GENERATION"}
)


def cpu_problems(target: Target) -> list[tuple[str, str, str]]:
    """``($.path, message, fix)`` for each ``[target.cpu]`` entry that does not fit the
    target's machine: a feature of another architecture, listed twice, or an x86-64 level on
    another known architecture (a machine kvenv does not know is not judged)."""
    cpu = target.cpu
    if cpu is None:
        return []
    problems: list[tuple[str, str, str]] = []
    known = ARCHES.get(target.machine)
    if cpu.level is not None and known is not None and known is not X86_FEATURES:
        problems.append(
            (
                "$.target.cpu.level",
                f"an x86-64 level is set for a {target.machine} target",
                'remove level, or set target.machine = "x86_64"',
            )
        )
    for index, feature in enumerate(cpu.features):
        where = f"$.target.cpu.features[{index}]"
        if feature in cpu.features[:index]:
            problems.append((where, f"{feature!r} is listed twice", "list each feature once"))
        elif known is not None and feature not in known:
            problems.append(
                (
                    where,
                    f"{feature!r} is not a feature of {target.machine} CPUs",
                    f"use one of: {', '.join(known)}",
                )
            )
    return problems


def loads_code(name: str) -> bool:
    """Whether the environment variable ``name`` changes how processes load code."""
    return name in LOADER_ENV or name.startswith(LOADER_PREFIXES)


def runtime_env_problems(runtime: Runtime) -> list[tuple[str, str, str]]:
    """``($.path, message, fix)`` for each ``[runtime.env]`` name kvenv sets itself, and each
    loader-changing name ``[runtime.allow_env]`` does not allow with a reason."""
    problems: list[tuple[str, str, str]] = []
    for name in runtime.env:
        where = f"$.runtime.env.{name}"
        if name in KVENV_SETS:
            problems.append(
                (where, f"{name} is set by kvenv's activation", "remove it from [runtime.env]")
            )
        elif loads_code(name) and name not in runtime.allow_env:
            problems.append(
                (
                    where,
                    f"{name} changes how processes load code; activation would export it",
                    f'remove it, or allow it with a reason: [runtime.allow_env] {name} = "why"',
                )
            )
    for name in runtime.allow_env:
        if name in KVENV_SETS:
            problems.append(
                (
                    f"$.runtime.allow_env.{name}",
                    f"{name} is set by kvenv's activation and cannot be allowed",
                    "remove it",
                )
            )
    return problems


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
