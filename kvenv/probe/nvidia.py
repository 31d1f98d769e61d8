"""The NVIDIA driver and the GPUs this process may use.

Driver version, first found of: ``/proc/driver/nvidia/version``, ``/sys/module/nvidia/version``,
NVML (``pynvml``, when importable), the ``nvidia-smi`` banner; the driver's CUDA version (the
newest CUDA it can run) from NVML or the banner. GPUs from NVML, else from
``nvidia-smi --query-gpu``. Both list every GPU on the machine, so ``CUDA_VISIBLE_DEVICES`` is
applied here the way the CUDA runtime applies it (indices or ``GPU-`` UUID prefixes, stopping at
the first entry that names no GPU). GPU indices are nvidia-smi's; their order is the visible
order. Absent tools and odd output are notes, never exceptions.
"""

from __future__ import annotations

import re

import attrs

from kvenv.model.snapshot import DriverInfo, GpuInfo
from kvenv.probe.effects import RUN_TIMEOUT, Effects, RunResult
from kvenv.probe.nvml import NvmlReading

PROC_VERSION = "/proc/driver/nvidia/version"
SYS_VERSION = "/sys/module/nvidia/version"
FIELDS = "index,uuid,name,compute_cap,memory.total"
FIELDS_OLD = "index,uuid,name,memory.total"  # drivers before 510 lack compute_cap
FORMAT = "--format=csv,noheader,nounits"

_DOTTED = re.compile(r"\d+(?:\.\d+)+")
_PROC = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
_BANNER_DRIVER = re.compile(r"Driver Version:\s*(\d+(?:\.\d+)+)")
_BANNER_CUDA = re.compile(r"CUDA Version:\s*(\d+(?:\.\d+)+)")
_CC = re.compile(r"\d+\.\d+")
_ASCII_INT = re.compile(r"[0-9]+")  # str.isdigit() also accepts "²", which int() refuses


@attrs.frozen
class PhysicalGpu:
    index: int
    name: str
    uuid: str | None = None
    compute_capability: str | None = None
    memory_mib: int | None = None

    def info(self) -> GpuInfo:
        return GpuInfo(self.index, self.name, self.compute_capability, self.memory_mib)


@attrs.frozen
class GpuProbe:
    """The driver (None: no NVIDIA driver found) and the GPUs visible to CUDA programs.

    ``listed`` is False when the GPUs could not be told (a driver without a working listing,
    or an ``nvidia-smi`` that did not answer); then ``gpus`` is empty but not a fact. No driver
    and no answer from any tool is a fact: no GPU is visible.
    """

    driver: DriverInfo | None
    gpus: tuple[GpuInfo, ...]
    notes: tuple[str, ...] = ()
    listed: bool = True


def parse_proc_version(text: str) -> str | None:
    """``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...`` -> 580.159.04."""
    match = _PROC.search(text)
    return match.group(1) if match else None


def parse_sys_version(text: str) -> str | None:
    value = text.strip()
    return value if _DOTTED.fullmatch(value) else None


def parse_banner(text: str) -> tuple[str | None, str | None]:
    """Driver version and CUDA version from the banner plain ``nvidia-smi`` prints."""
    driver = _BANNER_DRIVER.search(text)
    cuda = _BANNER_CUDA.search(text)
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None)


def _int(text: str) -> int | None:
    return int(text) if _ASCII_INT.fullmatch(text) else None


def parse_query(text: str, *, with_cc: bool = True) -> tuple[list[PhysicalGpu], list[str]]:
    """Rows of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``; rows that do
    not parse are reported in the notes and skipped."""
    width = 5 if with_cc else 4
    gpus: list[PhysicalGpu] = []
    notes: list[str] = []
    lines = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines, start=1):
        cells = [cell.strip() for cell in line.split(",")]  # nvidia-smi never quotes
        index = _int(cells[0])
        if len(cells) != width or index is None or not cells[2]:
            notes.append(f"nvidia-smi: row {number} not understood: {line[:120]!r}")
            continue
        memory = _int(cells[-1])
        cc = cells[3] if with_cc and _CC.fullmatch(cells[3]) else None
        gpus.append(PhysicalGpu(index, cells[2], cells[1] or None, cc, memory))
    return gpus, notes


def select_visible(
    gpus: list[PhysicalGpu], value: str | None
) -> tuple[list[PhysicalGpu], str | None]:
    """The GPUs ``CUDA_VISIBLE_DEVICES=value`` leaves visible, in its order, and a note."""
    if value is None:
        return gpus, None
    chosen: list[PhysicalGpu] = []
    stopped = ""
    for raw in value.split(","):
        entry = raw.strip()
        match = _match_device(gpus, entry)
        if match is None or match in chosen:
            stopped = f"; stopped at {entry!r} (names no GPU{' again' if match else ''})"
            break
        chosen.append(match)
    indices = ", ".join(str(g.index) for g in chosen) or "none"
    note = (
        f"CUDA_VISIBLE_DEVICES={value!r}: {len(chosen)} of {len(gpus)} GPU(s) visible "
        f"(nvidia-smi indices {indices}){stopped}"
    )
    return chosen, note


def _match_device(gpus: list[PhysicalGpu], entry: str) -> PhysicalGpu | None:
    number = _int(entry)
    if number is not None:
        return next((g for g in gpus if g.index == number), None)
    if entry.lower().startswith(("gpu-", "mig-")) and len(entry) > 4:
        found = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
        return found[0] if len(found) == 1 else None
    return None


def _driver_from_files(effects: Effects) -> DriverInfo | None:
    text = effects.read_text(PROC_VERSION)
    version = parse_proc_version(text) if text else None
    if version:
        return DriverInfo(version=version, source=PROC_VERSION)
    text = effects.read_text(SYS_VERSION)
    version = parse_sys_version(text) if text else None
    return DriverInfo(version=version, source=SYS_VERSION) if version else None


def _first_line(result: RunResult) -> str:
    return next((line.strip() for line in result.text.splitlines() if line.strip()), "")


def _gpus_from_smi(smi: str, effects: Effects) -> tuple[list[PhysicalGpu] | None, list[str], bool]:
    """The GPUs ``nvidia-smi`` lists (None: it failed), notes, and whether it answered."""
    result = effects.run([smi, f"--query-gpu={FIELDS}", FORMAT], RUN_TIMEOUT)
    with_cc = True
    if result is not None and result.returncode != 0 and "compute_cap" in result.text:
        result = effects.run([smi, f"--query-gpu={FIELDS_OLD}", FORMAT], RUN_TIMEOUT)
        with_cc = False
    if result is None:
        return None, ["nvidia-smi could not be run (timed out or not executable)"], False
    if result.returncode != 0:
        first = _first_line(result)
        if "no devices were found" in first.lower():
            return [], ["nvidia-smi: no devices were found (driver present, no GPU visible)"], True
        return None, [f"nvidia-smi failed (exit {result.returncode}): {first[:200]}"], True
    gpus, notes = parse_query(result.stdout, with_cc=with_cc)
    if not with_cc:
        notes.append("this nvidia-smi cannot report compute capability (driver before 510)")
    return gpus, notes, True


def probe_gpus(effects: Effects) -> GpuProbe:
    """The driver and the visible GPUs of the host behind ``effects``."""
    notes: list[str] = []
    driver = _driver_from_files(effects)
    reading: NvmlReading | None = effects.nvml()
    if reading is not None and reading.error:
        notes.append(reading.error)
        reading = None
    smi = effects.which("nvidia-smi")
    cuda_max = reading.cuda_max if reading else None
    if driver is None and reading is not None and reading.driver:
        driver = DriverInfo(version=reading.driver, source="nvml")
    if smi is not None and (driver is None or cuda_max is None):
        banner = effects.run([smi], RUN_TIMEOUT)
        if banner is not None and banner.returncode == 0:
            version, cuda_max = parse_banner(banner.stdout)
            if driver is None and version:
                driver = DriverInfo(version=version, source="nvidia-smi")
    if driver is not None:
        driver = attrs.evolve(driver, cuda_max=cuda_max)
    physical: list[PhysicalGpu] | None
    answered = True
    if reading is not None:
        physical = [
            PhysicalGpu(g.index, g.name, g.uuid, g.compute_capability, g.memory_mib)
            for g in reading.gpus
        ]
    elif smi is not None:
        physical, more, answered = _gpus_from_smi(smi, effects)
        notes.extend(more)
    else:
        physical = None
        if driver is not None:
            notes.append("nvidia-smi not found and pynvml not importable: GPUs not listed")
    if driver is None and not physical:
        why = "nvidia-smi is not on PATH" if smi is None else "nvidia-smi found no driver"
        notes.insert(0, f"no NVIDIA driver: {PROC_VERSION} is absent and {why}")
    visible, note = select_visible(physical or [], effects.environ.get("CUDA_VISIBLE_DEVICES"))
    if note and physical is not None:
        notes.append(note)
    listed = physical is not None or (driver is None and answered)
    return GpuProbe(driver, tuple(g.info() for g in visible), tuple(notes), listed)
