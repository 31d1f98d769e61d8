"""kvenv: pinned native wheels and verified dependency overlays on protected hosts.

Importing this package does no I/O and imports neither vllm, torch nor huggingface_hub.
"""

from __future__ import annotations

try:  # written by the build (hatch-vcs, from git: docs/compatibility.md); git-ignored
    from kvenv._version import __version__
except ImportError:  # a source tree on sys.path that was never built or installed
    __version__ = "0.2.0.dev0+unknown"

__all__ = ["__version__", "activate"]

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs CLI startup time
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def activate(
    profile: str | None = None, manifest: str | Path | None = None, *, strict: bool = False
) -> Any:
    """Activate an applied runtime in this interpreter and its children
    (see :mod:`kvenv.env.activation`). A module of the overlay this process already imported
    at another version gets a :class:`kvenv.errors.AlreadyImportedWarning`; with
    ``strict=True``, a :class:`kvenv.errors.ConflictError` instead, before anything changes."""
    from kvenv.env.activation import activate_in_process

    return activate_in_process(profile=profile, manifest=manifest, strict=strict)
