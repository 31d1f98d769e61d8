"""Reading the driver and the GPUs through NVML (``pynvml``, passed in), and the records of
what it said (:class:`NvmlReading`, which :class:`kvenv.probe.effects.Effects` returns)."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs


@attrs.frozen
class NvmlGpu:
    """One GPU as NVML lists it."""

    index: int
    uuid: str
    name: str
    compute_capability: str | None
    memory_mib: int | None


@attrs.frozen
class NvmlReading:
    """What NVML says, or why it could not say it (``error``)."""

    driver: str | None = None
    cuda_max: str | None = None
    gpus: tuple[NvmlGpu, ...] = ()
    error: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(code: int) -> str:
    """NVML encodes the driver's CUDA version as 1000 * major + 10 * minor (13000 -> 13.0)."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def read_nvml(nvml: Any) -> NvmlReading:
    """Everything NVML tells about the driver and each GPU; failures become ``error``."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError and friends: the driver is absent or unusable
        return NvmlReading(error=f"NVML could not start: {exc}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda_max = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                NvmlGpu(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    compute_capability=f"{major}.{minor}",
                    memory_mib=int(memory.total) // (1024 * 1024),
                )
            )
        return NvmlReading(driver=driver, cuda_max=cuda_max, gpus=tuple(gpus))
    except Exception as exc:  # any NVML call failing is a fact about this host, reported
        return NvmlReading(error=f"NVML query failed: {exc}")
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nvml.nvmlShutdown()
