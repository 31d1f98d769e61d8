"""An offline lock of unchanged inputs is a lookup: the lock text and its summary kept under a
key made of everything an offline resolution reads.

The key (:func:`memo_key`) covers the bytes of the profile and every file it extends, its host
snapshot, the existing lock (the previous lock feeds preferences, ``exclude-newer`` and the
portable choice), the ``--require``/``--prefer``/``--constraint``/``--native-requires`` files,
the flags and the index configuration (``--index-url``, the environment's), the identity of
every file of the lock cache (index pages, metadata, digests) and of local find-links
directories, and kvenv's own code. With ``--offline`` nothing else can change a resolution, so
a hit returns exactly what resolving would. Only offline locks use it: an online lock reads
the index, which may have changed. A kept result is used only while the wheels it locked are
as present in the artifact cache as they were (the protected-name check reads a wheel that is
at hand). Entries are written atomically; a damaged one is a miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvenv._util import jsonio
from kvenv._util.identity import code_identity

MEMO_DIR = "lock-memo-v1"
KEEP = 16  # entries kept; older ones are removed when a new one is written
_CACHE_KINDS = ("pages-v1", "metadata-v1", "digests-v1")


def _file_digest(path: Path | None) -> str:
    if path is None:
        return "none"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def _tree(root: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime) of every file below ``root``."""
    found: list[tuple[str, int, int]] = []
    base = str(root)
    cut = len(base) if base.endswith(os.sep) else len(base) + 1
    stack = [base]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            found.append((entry.path[cut:], st.st_size, st.st_mtime_ns))
    return sorted(found)


def _local(link: str) -> Path | None:
    """The directory a find-links location names on this machine; None for a remote one
    (whose pages, offline, come from the lock cache)."""
    if link.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return Path(unquote(urlsplit(link).path))
    return None if "://" in link else Path(link)


def memo_key(
    *,
    files: Sequence[Path | None],
    settings: Mapping[str, Any],
    cache_root: Path,
    find_links: Iterable[str],
) -> str:
    """The key of one offline lock: ``files`` (profile chain, snapshot, previous lock, input
    files) by their bytes, ``settings`` (flags, index configuration) by value, the lock cache
    and local find-links directories by the identity of their files, and kvenv's code."""
    from kvenv import __version__

    parts: dict[str, Any] = {
        "kvenv": __version__,
        "code": code_identity(),  # every module of kvenv: another kvenv never reuses a result
        "files": [[str(p) if p else None, _file_digest(p)] for p in files],
        "settings": dict(settings),
        "cache": {kind: _tree(cache_root / kind) for kind in _CACHE_KINDS},
        "find-links": {link: _tree(local) for link in find_links if (local := _local(link))},
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _entry(cache_root: Path, key: str) -> Path:
    return cache_root / MEMO_DIR / f"{key}.json"


def recall(
    cache_root: Path, key: str, present: Callable[[str, str], bool]
) -> tuple[str, dict[str, Any]] | None:
    """The lock text and summary kept under ``key``, when each wheel it locked is as present
    in the artifact cache (``present(sha256, filename)``) as when it was kept; else None."""
    try:
        entry = _entry(cache_root, key)
        data = jsonio.loads_json(entry.read_text(encoding="utf-8"), file=str(entry))
        text, summary, wheels = data["text"], data["summary"], data["wheels"]
        now = {sha: present(sha, name) for sha, name, _ in wheels}
        then = {sha: was for sha, _, was in wheels}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(text, str) or not isinstance(summary, dict) or now != then:
        return None
    return text, summary


def remember(
    cache_root: Path,
    key: str,
    result: tuple[str, Mapping[str, Any]],
    wheels: Iterable[tuple[str, str]],
    present: Callable[[str, str], bool],
) -> None:
    """Keep ``result`` (lock text, summary) under ``key`` with whether each of its ``wheels``
    (sha256, file name) is at hand; best effort (a memo that cannot be written costs the next
    offline lock a resolution, nothing else); the oldest entries beyond :data:`KEEP` go."""
    from kvenv._util import atomic

    text, summary = result
    directory = cache_root / MEMO_DIR
    data = {
        "text": text,
        "summary": dict(summary),
        "wheels": [[sha, name, present(sha, name)] for sha, name in wheels],
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic.write_json(_entry(cache_root, key), data, durable=False)
        entries = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
