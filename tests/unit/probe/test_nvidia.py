"""The driver and GPU probes, driven by recorded nvidia-smi outputs and /proc files."""

from __future__ import annotations

import types
from typing import Any

import pytest

from kvenv.probe.host import list_gpus
from kvenv.probe.nvidia import (
    PhysicalGpu,
    parse_banner,
    parse_proc_version,
    parse_query,
    parse_sys_version,
    probe_gpus,
    select_visible,
)
from kvenv.probe.nvml import NvmlGpu, NvmlReading, read_nvml
from tests.support import hostfixtures as hf


@pytest.mark.parametrize("name", hf.SCENARIOS)
def test_recorded_hosts(name: str) -> None:
    expect = hf.scenario(name)["expect"]
    probe = probe_gpus(hf.effects(name))
    driver = probe.driver
    assert (driver.version if driver else None) == expect["driver"]
    assert (driver.source if driver else None) == expect["driver_source"]
    assert (driver.cuda_max if driver else None) == expect["cuda_max"]
    got = [[g.index, g.name, g.compute_capability, g.memory_mib] for g in probe.gpus]
    assert got == expect["gpus"]
    if "note" in expect:
        assert any(expect["note"] in note for note in probe.notes), probe.notes


def test_kaggle_reference_values() -> None:
    gpus = list_gpus(effects=hf.effects("kaggle-t4x2"))
    assert [(g.name, g.compute_capability, g.memory_mib) for g in gpus] == [
        ("Tesla T4", "7.5", 15360)
    ] * 2


def test_proc_version_formats() -> None:
    proprietary = (hf.ROOT / "kaggle-t4x2" / "proc-version.txt").read_text()
    open_module = (hf.ROOT / "h100x8" / "proc-version.txt").read_text()
    assert parse_proc_version(proprietary) == "580.159.04"
    assert parse_proc_version(open_module) == "550.127.05"
    assert parse_proc_version("NVRM version: something else entirely") is None
    assert parse_sys_version("570.124.06\n") == "570.124.06"
    assert parse_sys_version("garbage\n") is None


def test_banner() -> None:
    text = (hf.ROOT / "h200" / "nvidia-smi.txt").read_text()
    assert parse_banner(text) == ("570.124.06", "12.8")
    assert parse_banner("No devices were found") == (None, None)


def test_garbled_rows_are_notes_not_errors() -> None:
    gpus, notes = parse_query((hf.ROOT / "garbled" / "query-gpu.csv").read_text())
    assert [g.index for g in gpus] == [0, 2]
    assert len(notes) == 3
    assert all("not understood" in n for n in notes)


def _h100(env: dict[str, str]) -> list[int]:
    return [g.index for g in probe_gpus(hf.effects("h100x8", environ=env)).gpus]


UUIDS: list[str] = hf.scenario("h100x8")["uuids"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0,1,2,3,4,5,6,7", [0, 1, 2, 3, 4, 5, 6, 7]),
        ("3,1", [3, 1]),
        (" 5 , 2 ", [5, 2]),
        ("", []),
        ("-1", []),
        ("2,9,4", [2]),  # CUDA stops at the first entry that names no device
        ("1,1,2", [1]),  # a repeated device ends the list too
        (UUIDS[6], [6]),
        (UUIDS[6][:12] + "," + "0", [6, 0]),  # unique UUID prefixes are accepted
        ("GPU-", []),
        ("MIG-3b1e8f2a", []),
        ("nonsense", []),
    ],
)
def test_cuda_visible_devices(value: str, expected: list[int]) -> None:
    assert _h100({"CUDA_VISIBLE_DEVICES": value}) == expected


def test_visible_subset_is_noted() -> None:
    probe = probe_gpus(hf.effects("h100x8", environ={"CUDA_VISIBLE_DEVICES": "3,GPU-7c2d"}))
    assert [g.index for g in probe.gpus] == [3, 1]
    assert any("2 of 8 GPU(s) visible" in n for n in probe.notes)


def test_ambiguous_uuid_prefix_stops() -> None:
    gpus = [PhysicalGpu(0, "A", "GPU-abc1"), PhysicalGpu(1, "A", "GPU-abc2")]
    visible, note = select_visible(gpus, "GPU-abc")
    assert visible == []
    assert note is not None and "stopped" in note


def test_unset_means_all() -> None:
    gpus = [PhysicalGpu(0, "A"), PhysicalGpu(1, "B")]
    assert select_visible(gpus, None) == (gpus, None)


def test_nvml_is_preferred_when_importable() -> None:
    reading = NvmlReading(
        driver="580.159.04",
        cuda_max="13.0",
        gpus=(NvmlGpu(0, "GPU-aa", "Tesla T4", "7.5", 15360),),
    )
    fx = hf.effects("sys-only", nvml=reading, environ={"CUDA_VISIBLE_DEVICES": "0"})
    probe = probe_gpus(fx)
    assert probe.driver is not None
    assert probe.driver.source == "/sys/module/nvidia/version"
    assert probe.driver.cuda_max == "13.0"
    assert [g.name for g in probe.gpus] == ["Tesla T4"]


def test_nvml_failure_falls_back_to_nvidia_smi() -> None:
    fx = hf.effects("h200", nvml=NvmlReading(error="NVML could not start: Driver Not Loaded"))
    probe = probe_gpus(fx)
    assert [g.name for g in probe.gpus] == ["NVIDIA H200"]
    assert "NVML could not start: Driver Not Loaded" in probe.notes


class _FakeNvml:
    """The subset of pynvml the reader calls, with H200 answers."""

    def __init__(self, *, fail_init: bool = False, fail_query: bool = False) -> None:
        self.fail_init, self.fail_query, self.shut = fail_init, fail_query, False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"570.124.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        if self.fail_query:
            raise RuntimeError("GPU is lost")
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=143771 * 1024 * 1024)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:08d}"

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"


def test_read_nvml() -> None:
    fake = _FakeNvml()
    reading = read_nvml(fake)
    assert reading.driver == "570.124.06"
    assert reading.cuda_max == "12.8"
    assert [(g.index, g.name, g.compute_capability, g.memory_mib) for g in reading.gpus] == [
        (0, "NVIDIA H200", "9.0", 143771),
        (1, "NVIDIA H200", "9.0", 143771),
    ]
    assert fake.shut


def test_read_nvml_failures_are_facts() -> None:
    assert read_nvml(_FakeNvml(fail_init=True)).error == "NVML could not start: Driver Not Loaded"
    failed = _FakeNvml(fail_query=True)
    assert read_nvml(failed).error == "NVML query failed: GPU is lost"
    assert failed.shut


@pytest.mark.parametrize("digit", ["²", "٣", "１"])
def test_non_ascii_digits_are_notes_not_errors(digit: str) -> None:
    # str.isdigit() is True for all of these; int() refuses "²" and must not be reached.
    gpus, notes = parse_query(
        f"{digit}, GPU-a, Tesla T4, 7.5, {digit}\n0, GPU-b, Tesla T4, 7.5, x\n"
    )
    assert [(g.index, g.memory_mib) for g in gpus] == [(0, None)]
    assert len(notes) == 1 and "row 1 not understood" in notes[0]
    visible, note = select_visible([PhysicalGpu(0, "A"), PhysicalGpu(2, "B")], f"{digit},0")
    assert visible == []
    assert note is not None and "stopped" in note
