"""The CUDA toolkit (home, nvcc, version) and the driver library ``libcuda``.

Toolkit home: ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``, else two levels above the
``nvcc`` on PATH. Version: the toolkit's ``version.json`` (nvcc's entry), ``version.txt``, else
``nvcc --version``. libcuda: the container locations first (``/usr/local/nvidia/lib64``, where
Kaggle mounts the driver, and ``/usr/local/cuda/compat``), then ``$LD_LIBRARY_PATH``, the usual
system directories and the loader cache.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from kvenv._util import jsonio
from kvenv.model.snapshot import CudaInfo
from kvenv.probe.effects import RUN_TIMEOUT, Effects

NVIDIA_LIB = "/usr/local/nvidia/lib64"
DEFAULT_HOME = "/usr/local/cuda"
LIBCUDA_FIRST = (
    f"{NVIDIA_LIB}/libcuda.so",
    f"{NVIDIA_LIB}/libcuda.so.1",
    f"{DEFAULT_HOME}/compat/libcuda.so",
    f"{DEFAULT_HOME}/compat/libcuda.so.1",
)
SYSTEM_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/lib/wsl/lib",
)
_NVCC_RELEASE = re.compile(r"release\s+[\d.]+,\s*V(\d+(?:\.\d+)+)")
_VERSION_TXT = re.compile(r"CUDA Version\s+(\d+(?:\.\d+)+)")
_LDCONFIG = re.compile(r"libcuda\.so(?:\.1)?\s.*=>\s*(\S+)")


def _home(effects: Effects) -> str | None:
    for name in ("CUDA_HOME", "CUDA_PATH"):
        value = effects.environ.get(name)
        if value and effects.is_dir(value):
            return value
    if effects.is_dir(DEFAULT_HOME):
        return DEFAULT_HOME
    nvcc = effects.which("nvcc")
    return str(PurePosixPath(nvcc).parent.parent) if nvcc else None


def parse_version_json(text: str) -> str | None:
    try:
        data = jsonio.loads_json(text, file="version.json")
    except ValueError:  # malformed, or nested too deeply
        return None
    if not isinstance(data, dict):
        return None
    for key in ("cuda_nvcc", "cuda"):
        entry = data.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("version"), str):
            return str(entry["version"])
    return None


def parse_nvcc(text: str) -> str | None:
    """``Cuda compilation tools, release 12.8, V12.8.93`` -> 12.8.93."""
    match = _NVCC_RELEASE.search(text)
    return match.group(1) if match else None


def _toolkit_version(home: str | None, nvcc: str | None, effects: Effects) -> str | None:
    if home:
        text = effects.read_text(f"{home}/version.json")
        version = parse_version_json(text) if text else None
        if version:
            return version
        text = effects.read_text(f"{home}/version.txt")
        match = _VERSION_TXT.search(text) if text else None
        if match:
            return match.group(1)
    if nvcc:
        result = effects.run([nvcc, "--version"], RUN_TIMEOUT)
        if result is not None and result.returncode == 0:
            return parse_nvcc(result.stdout)
    return None


def find_libcuda(effects: Effects) -> str | None:
    """The first libcuda the dynamic loader could use, container locations first."""
    dirs = [d for d in effects.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    candidates = list(LIBCUDA_FIRST)
    for directory in [*dirs, *SYSTEM_LIB_DIRS]:
        candidates += [f"{directory}/libcuda.so.1", f"{directory}/libcuda.so"]
    for path in candidates:
        if effects.exists(path):
            return path
    ldconfig = effects.which("ldconfig") or (
        "/sbin/ldconfig" if effects.exists("/sbin/ldconfig") else None
    )
    if ldconfig is None:
        return None
    result = effects.run([ldconfig, "-p"], 10.0)
    if result is None or result.returncode != 0:
        return None
    match = _LDCONFIG.search(result.stdout)
    return match.group(1) if match else None


def probe_cuda(effects: Effects) -> CudaInfo:
    home = _home(effects)
    nvcc = f"{home}/bin/nvcc" if home and effects.exists(f"{home}/bin/nvcc") else None
    nvcc = nvcc or effects.which("nvcc")
    library_dirs = [d for d in (NVIDIA_LIB, f"{home}/lib64" if home else "") if d]
    return CudaInfo(
        home=home,
        toolkit_version=_toolkit_version(home, nvcc, effects),
        nvcc=nvcc,
        libcuda=find_libcuda(effects),
        library_dirs=[d for d in library_dirs if effects.is_dir(d)],
    )
