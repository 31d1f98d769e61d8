"""Getting every artifact of an apply onto this machine, verified, in a content-addressed cache.

:func:`fetch_all` is the one entry point; sources live in :mod:`kvenv.fetch.hub` (Hugging Face
Hub), :mod:`kvenv.fetch.http` (https URLs), :mod:`kvenv.fetch.index` (package index) and local
paths; the cache in :mod:`kvenv.fetch.cache`. Importing this package imports neither
``huggingface_hub`` nor ``unearth``.
"""

from __future__ import annotations

from kvenv._util.progress import Progress
from kvenv.fetch.cache import ArtifactCache, default_cache_root
from kvenv.fetch.core import LocalFiles, fetch_all

__all__ = ["ArtifactCache", "LocalFiles", "Progress", "default_cache_root", "fetch_all"]
