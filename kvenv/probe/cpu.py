"""The CPU from the kernel's own report, ``/proc/cpuinfo``: its model, the x86-64 level its
flags reach and the instruction-set features native wheels need (:mod:`kvenv.model.cpuisa`).

x86 lists ``flags``, aarch64 ``Features``; a feature counts only when every processor lists it
(a machine with unlike cores runs a process on any of them). No ``/proc/cpuinfo`` (not Linux,
or a sandbox hides it) leaves it unrecorded, never an error.
"""

from __future__ import annotations

from kvenv.model import cpuisa
from kvenv.model.fields import NonEmpty
from kvenv.model.snapshot import CpuInfo
from kvenv.probe.effects import Effects

CPUINFO = "/proc/cpuinfo"
_FLAG_KEYS = ("flags", "features")
_MODEL_KEYS = ("model name", "hardware", "cpu model")


def parse_cpuinfo(text: str, machine: str) -> CpuInfo:
    """The :class:`CpuInfo` of a ``/proc/cpuinfo`` text for ``machine`` (pure)."""
    model: str | None = None
    common: set[str] | None = None
    arm: dict[str, str] = {}  # aarch64 names no model: its implementer and part say it
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in _MODEL_KEYS and model is None and value.strip():
            model = value.strip()
        elif key in ("cpu implementer", "cpu part") and value.strip():
            arm.setdefault(key, value.strip())
        elif key in _FLAG_KEYS:
            flags = set(value.split())
            common = flags if common is None else common & flags
    flags = common or set()
    if model is None and len(arm) == 2:
        model = f"CPU implementer {arm['cpu implementer']}, part {arm['cpu part']}"
    x86 = cpuisa.ARCHES.get(machine) is cpuisa.X86_FEATURES
    return CpuInfo(
        arch=NonEmpty(machine),
        model=model,
        level=cpuisa.x86_level(flags) if x86 and flags else None,
        features=cpuisa.tracked(machine, flags),
    )


def probe_cpu(effects: Effects, *, machine: str) -> CpuInfo | None:
    """The host's CPU; None when the kernel's report cannot be read (``kvenv doctor`` then
    reports a profile's ``[target.cpu]`` as untested)."""
    text = effects.read_text(CPUINFO)
    return None if text is None else parse_cpuinfo(text, machine)
