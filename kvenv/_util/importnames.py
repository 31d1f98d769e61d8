"""Which import names a distribution owns, and what a top-level entry stands for.

Light on purpose (only ``re``): activation, verify and the wheel installer all ask whether a
file would land in a protected package's import names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

KNOWN_IMPORT_NAMES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "functorch", "torchgen"),
    "torchvision": ("torchvision",),
    "torchaudio": ("torchaudio",),
}


def fold(name: str) -> str:
    """Fold a distribution or import name for comparison: case, '-', '_' and '.' alike."""
    return re.sub(r"[-_.]+", "_", name).lower()


def protected_import_names(protected: Iterable[str]) -> frozenset[str]:
    """The folded import names that the protected distributions own."""
    names: set[str] = set()
    for dist in protected:
        canonical = re.sub(r"[-_.]+", "-", dist).lower()
        names.add(fold(canonical))
        names.update(fold(n) for n in KNOWN_IMPORT_NAMES.get(canonical, ()))
    return frozenset(names)


def import_name_of(component: str) -> str:
    """The import (or distribution) name a top-level entry stands for, folded.

    ``torch`` -> torch, ``torch.py`` / ``torch.cpython-312-x86_64-linux-gnu.so`` -> torch,
    ``torch-2.10.0.dist-info`` -> torch.
    """
    for suffix in (".dist-info", ".egg-info", ".data", ".egg-link"):
        if component.endswith(suffix):
            return fold(component[: -len(suffix)].split("-", 1)[0])
    return fold(component.split(".", 1)[0])
