"""Getting every artifact of an apply onto this machine, verified, in a content-addressed cache.

:func:`fetch_all` is the one entry point; sources live in :mod:`kvenv.fetch.hub` (Hugging Face
Hub), :mod:`kvenv.fetch.http` (https URLs), :mod:`kvenv.fetch.index` (package index) and local
paths; the cache in :mod:`kvenv.fetch.cache`. Importing this package imports neither
``huggingface_hub`` nor ``unearth``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvenv._util.progress import Progress
    from kvenv.fetch.cache import ArtifactCache, default_cache_root
    from kvenv.fetch.core import LocalFiles, fetch_all

__all__ = ["ArtifactCache", "LocalFiles", "Progress", "default_cache_root", "fetch_all"]

# The names above are imported on first use, not with the package: ``kvenv plan`` and a no-op
# ``apply`` import ``kvenv.fetch.cache`` (a few stdlib modules), and must not pay for the
# downloaders (``http.client``, ``ssl``) that ``kvenv.fetch.core`` imports.
_LAZY = {
    "ArtifactCache": "kvenv.fetch.cache",
    "default_cache_root": "kvenv.fetch.cache",
    "LocalFiles": "kvenv.fetch.core",
    "fetch_all": "kvenv.fetch.core",
    "Progress": "kvenv._util.progress",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
