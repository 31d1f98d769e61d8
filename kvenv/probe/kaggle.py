"""Is this a Kaggle notebook? The reference system's rule: a Kaggle variable, or both dirs."""

from __future__ import annotations

from kvenv.probe.effects import Effects

MARKER_VARS = ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_DOCKER_IMAGE")
MARKER_DIRS = ("/kaggle/working", "/kaggle/input")


def is_kaggle(effects: Effects) -> bool:
    """True when a Kaggle variable is set, or both /kaggle/working and /kaggle/input exist."""
    if any(effects.environ.get(name) for name in MARKER_VARS):
        return True
    return all(effects.is_dir(path) for path in MARKER_DIRS)
