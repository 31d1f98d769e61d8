"""Where kvenv's built-in data (profiles, locks, schemas) lives: inside the installed wheel
(``kvenv/_data``), or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def data_dir(kind: str) -> Path:
    """The directory of built-in ``profiles``, ``locks`` or ``schemas``."""
    packaged = _PACKAGE / "_data" / kind
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / kind
