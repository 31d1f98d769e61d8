"""How many GPUs a CUDA program started now would see, without importing torch.

The listing is :mod:`kvenv.probe`'s (NVML or ``nvidia-smi``, with ``CUDA_VISIBLE_DEVICES``
applied the way CUDA applies it). No NVIDIA driver found is a fact (0 GPUs, CUDA programs see
none); the count is unknown (None) only when the GPUs could not be told (a driver whose GPUs
could not be listed, an ``nvidia-smi`` that did not answer), and callers then skip their check
rather than guess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from kvenv.probe.effects import Effects


@attrs.frozen
class GpuCount:
    count: int | None
    source: str

    def describe(self) -> str:
        return f"{self.count} ({self.source})" if self.count is not None else "unknown"


def visible_gpu_count(effects: Effects | None = None) -> GpuCount:
    """The number of GPUs visible to CUDA programs (``effects``: the host, live by default)."""
    from kvenv.probe import nvidia
    from kvenv.probe.effects import live

    host = effects or live()
    probe = nvidia.probe_gpus(host)
    if not probe.listed:
        return GpuCount(None, "the NVIDIA GPUs could not be listed")
    if probe.driver is None and not probe.gpus:
        return GpuCount(0, "no NVIDIA driver found")
    visible = host.environ.get("CUDA_VISIBLE_DEVICES")
    where = "NVIDIA driver" + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
    return GpuCount(len(probe.gpus), where)
