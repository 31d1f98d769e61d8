"""The identity another interpreter's own facts are memoized under (its binary, the binary it
resolves to, its ``pyvenv.cfg`` and the directories of its import path, as stat results),
computed with the standard library only: :mod:`kvenv.probe.pyinfo` keeps the facts under it,
and :mod:`kvenv.probe.hostmemo` checks it on the start-up paths without loading the model."""

from __future__ import annotations

import os

from kvenv._util.identity import stamp
from kvenv.probe.child import FACTS_VERSION


def remote_identity(python: str, sys_path: tuple[str, ...]) -> list[object] | None:
    """What the facts of ``python -I`` depend on, as stat results; None for anything but a
    native executable (an interpreter chosen by a script cannot be pinned by its stat)."""
    try:
        with open(python, "rb") as handle:
            if handle.read(4) != b"\x7fELF":
                return None
    except OSError:
        return None
    real = os.path.realpath(python)
    bindir = os.path.dirname(os.path.abspath(python))
    configs = [os.path.join(d, "pyvenv.cfg") for d in (bindir, os.path.dirname(bindir))]
    return [
        ["kvenv probe", FACTS_VERSION],
        stamp(python),
        stamp(real),
        *(stamp(c) for c in configs),
        *(stamp(d) for d in sys_path),
    ]
