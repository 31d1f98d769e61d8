"""Installed distributions on an import path, read with ``importlib.metadata``.

Only the metadata headers are read (name, version, Requires-Dist), never the long
description and never an import, so a few hundred distributions take milliseconds. The first
distribution of a name on the path wins, as it does at import time; later ones are shadowed.
"""

from __future__ import annotations

import importlib.metadata as metadata
from collections.abc import Iterable, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kvenv.model.fields import PackageName, Pep440Version, check
from kvenv.model.snapshot import Distribution


def parse_headers(text: str) -> tuple[str | None, str | None, list[str]]:
    """Name, Version and the Requires-Dist lines of a METADATA/PKG-INFO document (RFC 822
    headers up to the first blank line; continuation lines are folded)."""
    name = version = None
    requires: list[str] = []
    last: str | None = None
    end = text.find("\n\n")
    for line in (text if end < 0 else text[:end]).splitlines():
        if not line.strip():
            break
        if line[0] in " \t":
            if last == "requires-dist" and requires:
                requires[-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        last = key.strip().lower()
        value = value.strip()
        if last == "name" and name is None:
            name = value
        elif last == "version" and version is None:
            version = value
        elif last == "requires-dist":
            requires.append(value)
    return name, version, requires


def _read(dist: metadata.Distribution) -> tuple[str | None, str | None, list[str] | None]:
    text = dist.read_text("METADATA")
    if text is not None:
        name, version, requires = parse_headers(text)
        return name, version, requires
    text = dist.read_text("PKG-INFO")  # egg-info: requirements live in requires.txt
    if text is None:
        return None, None, None
    name, version, _ = parse_headers(text)
    return name, version, list(dist.requires or [])


def _location(dist: metadata.Distribution) -> str | None:
    try:
        return str(dist.locate_file(""))
    except (RuntimeError, OSError):  # a finder's Distribution may not support locate_file
        return None


def to_distribution(
    name: str, version: str | None, requires: list[str] | None, location: str | None
) -> Distribution:
    note = None
    checked: Pep440Version | None = None
    if version is not None:
        try:
            Version(version)
            checked = Pep440Version(version)
        except InvalidVersion:
            note = f"malformed version metadata: {version!r}"
    else:
        note = "no Version in its metadata"
    return Distribution(PackageName(name), checked, requires, location, note)


def read_distributions(
    sys_path: Sequence[str],
    *,
    found: Iterable[metadata.Distribution] | None = None,
) -> tuple[list[Distribution], list[str]]:
    """Every distribution visible on ``sys_path`` (first of a name wins), sorted by name, and
    notes about entries that could not be read."""
    dists = metadata.distributions(path=list(sys_path)) if found is None else found
    seen: set[str] = set()
    out: list[Distribution] = []
    notes: list[str] = []
    for dist in dists:
        try:
            name, version, requires = _read(dist)
        except (OSError, UnicodeDecodeError) as exc:
            notes.append(f"unreadable metadata at {_location(dist)}: {exc}")
            continue
        if not name or check(PackageName, name) is not None:
            notes.append(f"distribution without a valid name at {_location(dist)}: {name!r}")
            continue
        key = canonicalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        out.append(to_distribution(name, version, requires, _location(dist)))
    out.sort(key=lambda d: canonicalize_name(d.name))
    return out, notes
