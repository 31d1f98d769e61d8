"""The CPU instruction-set facts that decide whether a native wheel's code can run: the feature
names kvenv tracks (the kernel's own spelling, from ``/proc/cpuinfo``) and the x86-64
microarchitecture levels of the psABI, computed from a CPU's flags. Pure.

The x86-64 psABI defines each level as the one below plus a set of features; the kernel's
names for them are used here (``pni`` is SSE3, ``abm`` is LZCNT, ``lahf_lm`` is LAHF/SAHF in
64-bit mode, ``xsave`` stands in for OSXSAVE, which the kernel does not list).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

X86Feature = Literal[
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512vl",
    "avx512_bf16",
    "avx512_vnni",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
]
Aarch64Feature = Literal["asimd", "asimddp", "asimdhp", "bf16", "i8mm", "sve", "sve2"]
CpuFeature = Literal[X86Feature, Aarch64Feature]
X86Level = Literal["x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"]

X86_FEATURES: tuple[str, ...] = get_args(X86Feature)
AARCH64_FEATURES: tuple[str, ...] = get_args(Aarch64Feature)
LEVELS: tuple[str, ...] = get_args(X86Level)

# The psABI's levels, each as the features it adds to the one below (kernel flag names).
_LEVEL_ADDS: tuple[frozenset[str], ...] = (
    frozenset({"lm", "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2"}),
    frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
    frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
)

# Which architecture (a target's ``machine``) each tracked feature belongs to.
ARCHES: dict[str, tuple[str, ...]] = {
    "x86_64": X86_FEATURES,
    "amd64": X86_FEATURES,
    "aarch64": AARCH64_FEATURES,
    "arm64": AARCH64_FEATURES,
}


def x86_level(flags: Iterable[str]) -> str | None:
    """The highest psABI level whose features ``flags`` all has (``x86-64-v1``..``v4``), or
    None when even the baseline is incomplete."""
    have = set(flags)
    level: str | None = None
    for name, adds in zip(LEVELS, _LEVEL_ADDS, strict=True):
        if not adds <= have:
            break
        level = name
    return level


def level_missing(flags: Iterable[str], level: str) -> list[str]:
    """The features ``level`` needs (with every level below it) that ``flags`` lacks, sorted."""
    have = set(flags)
    needed: set[str] = set()
    for name, adds in zip(LEVELS, _LEVEL_ADDS, strict=True):
        needed |= adds
        if name == level:
            break
    return sorted(needed - have)


def level_number(level: str) -> int:
    """``x86-64-v3`` -> 3."""
    return LEVELS.index(level) + 1


def tracked(machine: str, flags: Iterable[str]) -> list[str]:
    """The features of ``flags`` that kvenv records for ``machine``, in the tracked order."""
    have = set(flags)
    return [f for f in ARCHES.get(machine, ()) if f in have]
