"""Counting visible GPUs through kvenv.probe, on recorded hosts."""

from __future__ import annotations

from kvenv.probe.effects import Effects, RunResult
from kvenv.runtime.gpus import visible_gpu_count

QUERY = (
    "nvidia-smi --query-gpu=index,uuid,name,compute_cap,memory.total --format=csv,noheader,nounits"
)
PROC = {
    "/proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05\n"
}
TWO_T4 = "0, GPU-aaaa1111, Tesla T4, 7.5, 15360\n1, GPU-bbbb2222, Tesla T4, 7.5, 15360\n"


def _host(environ: dict[str, str] | None = None, *, driver: bool = True) -> Effects:
    return Effects.recorded(
        files=PROC if driver else {},
        commands={QUERY: RunResult(0, TWO_T4, "")} if driver else {},
        environ=environ,
    )


def test_all_gpus_visible() -> None:
    found = visible_gpu_count(_host())
    assert found.count == 2
    assert found.describe() == "2 (NVIDIA driver)"


def test_cuda_visible_devices_applies() -> None:
    assert visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": "1"})).count == 1
    assert visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})).count == 1
    assert visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": ""})).count == 0
    # CUDA stops at the first entry that names no GPU
    assert visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": "0,7,1"})).count == 1
    assert (
        "CUDA_VISIBLE_DEVICES='0,7,1'"
        in visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": "0,7,1"})).describe()
    )


def test_no_driver_means_no_gpu() -> None:
    # No driver file, no nvidia-smi, no NVML: a CUDA program sees no GPU. That is a fact.
    found = visible_gpu_count(_host({"CUDA_VISIBLE_DEVICES": "0,1"}, driver=False))
    assert found.count == 0
    assert found.describe() == "0 (no NVIDIA driver found)"


def test_nvidia_smi_without_a_driver_means_no_gpu() -> None:
    failed = RunResult(
        9, "", "NVIDIA-SMI has failed because it couldn't communicate with the driver"
    )
    host = Effects.recorded(commands={QUERY: failed, "nvidia-smi": failed})
    assert visible_gpu_count(host).count == 0


def test_gpus_that_cannot_be_listed_are_unknown() -> None:
    # A driver, but nvidia-smi does not answer (timed out): the count cannot be told.
    host = Effects.recorded(files=PROC, commands={"nvidia-smi -L": RunResult(0, "", "")})
    found = visible_gpu_count(host)
    assert found.count is None
    assert found.describe() == "unknown"
    # A driver and no tool to list its GPUs at all.
    assert visible_gpu_count(Effects.recorded(files=PROC)).count is None
    # No driver file and an nvidia-smi that does not answer: unknown too, not "no GPU".
    assert (
        visible_gpu_count(Effects.recorded(commands={"nvidia-smi -L": RunResult(0, "", "")})).count
        is None
    )
