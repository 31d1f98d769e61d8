"""What ``kvenv lock --check`` and an unchanged offline ``kvenv lock`` keep in the memo
(:mod:`kvenv._util.memo`), so a repeat answers without loading the profile (issue 13). Both
are keyed by what names the profile (:func:`kvenv.model.facts.profile_key`) and valid while
everything the full path read is unchanged: what the loader read (the bytes of every file of
the ``extends`` chain and every directory a name was looked up in,
:attr:`kvenv.model.loading.LoadedProfile.reads`), what the command read after it, and kvenv's
code (which the memo adds).

- ``lock-check`` (:func:`check_key`): a check that passed, for the lock it checked (``--output``
  or the profile's) and the artifact cache it looked in for wheels at hand. Its dependencies
  are recorded as the check reads them: the lock's and the host snapshot's bytes (the very
  bytes parsed, so an edit racing the check makes the next run miss) and the identity of every
  place a locked wheel may be at hand and of a ``path`` native wheel of no pinned size
  (:mod:`kvenv.lock.check` notes them), and the bytes of every cached index page a published
  hash was read from (:mod:`kvenv.lock.published`). The lock's bytes are among them, so a
  hand edit of the lock is never answered from the record. The value is what the check
  reports. A check that failed is never kept: it always runs in full and reports every
  problem.
- ``lock-result`` (:func:`result_key`): an offline lock's text and summary. The key adds the
  flags that decide a resolution (:data:`RESULT_FLAGS`) and the index configuration; the
  dependencies add (:func:`result_inputs`, captured before the resolution reads them) the
  previous lock, the host snapshot and the ``--require``/``--prefer``/``--constraint``/
  ``--native-requires`` files by their bytes, the lock cache (index pages, their parsed
  wheels, metadata, digests, linkage) and local find-links directories as trees, and each
  wheel at hand the protected-name check looked for and a ``path`` native wheel (noted as
  they are looked at). With ``--offline`` nothing else can change a resolution, so
  a hit returns exactly what resolving would; online locks read the index and never use it.
  Only a lock that left the file unchanged is kept, so a hit means the file holds its text.

A damaged or unreadable record is a miss, never an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvenv._util import memo
from kvenv.model.facts import profile_key

CHECK_KIND = "lock-check"
RESULT_KIND = "lock-result"
# the flags of ``kvenv lock`` (besides the index's) that decide an offline resolution
RESULT_FLAGS = (
    "profile",
    "output",
    "native_requires",
    "require",
    "prefer",
    "constraint",
    "exclude_newer",
    "fresh",
    "portable",
    "upgrade",
    "upgrade_package",
)
_CACHE_KINDS = ("pages-v1", "metadata-v1", "digests-v1", "parsed-v1", "linkage-v1")


def _plain(value: Any) -> Any:
    """``value`` as JSON (paths as text)."""
    return json.loads(json.dumps(value, default=str))


def check_key(
    profile: str | None, output: Path | None, at_hand_root: Path, index: Iterable[Any] = ()
) -> list[Any]:
    """The key of the check of ``profile``'s lock (``output``: ``--output``, or None for the
    profile's), looking for wheels at hand in ``at_hand_root`` and for published hashes on
    ``index`` (:func:`kvenv.lock.indexflags.index_values`)."""
    return [profile_key(profile), _plain(output), str(at_hand_root), _plain(list(index))]


def result_key(flags: Mapping[str, Any], index: Iterable[Any], cache_root: Path) -> list[Any]:
    """The key of one offline lock: ``flags`` (:data:`RESULT_FLAGS`, as given), ``index``
    (:func:`kvenv.lock.indexflags.index_values`) and the cache it reads."""
    return [profile_key(flags["profile"]), _plain(flags), _plain(list(index)), str(cache_root)]


def _local(link: str) -> Path | None:
    """The directory a find-links location names on this machine; None for a remote one
    (whose pages, offline, come from the lock cache)."""
    if link.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return Path(unquote(urlsplit(link).path))
    return None if "://" in link else Path(link)


def result_inputs(
    flags: Mapping[str, Any],
    *,
    lock: Path,
    snapshot: Path | None,
    cache_root: Path,
    find_links: Iterable[str],
) -> list[list[Any]]:
    """What an offline lock reads beside the profile, captured before it reads it: the
    previous lock (``lock``: the profile's, unless ``--output``), the host snapshot and the
    input files by their bytes (None: absent), the lock cache and local find-links directories
    as trees."""
    files = [
        flags["output"] or lock,
        snapshot,
        flags["native_requires"],
        *flags["require"],
        *flags["prefer"],
        *flags["constraint"],
    ]
    deps = [memo.dep("bytes", os.path.abspath(path)) for path in files if path is not None]
    trees = [cache_root / kind for kind in _CACHE_KINDS]
    trees += [local for link in find_links if (local := _local(link)) is not None]
    return deps + [memo.dep("tree", [str(tree), False]) for tree in trees]


def recall(root: Path, kind: str, key: Any) -> dict[str, Any] | None:
    """The value kept for ``key`` of ``kind`` (:data:`CHECK_KIND`, :data:`RESULT_KIND`), or None."""
    value = memo.get(root, kind, key)
    return value if isinstance(value, dict) else None
