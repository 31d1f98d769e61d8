"""The shared libraries the host provides, by the file names a ``DT_NEEDED`` entry uses: the
dynamic loader's cache (``ldconfig -p``) and the libraries torch and the ``nvidia-*``
distributions install (from their ``RECORD``), so the native wheel's linkage can be checked
against the host (:mod:`kvenv.probe.linkage`).

Read through :class:`kvenv.probe.effects.Effects`; what cannot be read is left out (``system``
None when there is no ``ldconfig``), never an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from packaging.utils import canonicalize_name

from kvenv.model.snapshot import Distribution, LibraryInfo
from kvenv.probe.effects import Effects

# A shared library's file name: lib<name>.so, optionally with its version (libcudart.so.12).
_LIBRARY = re.compile(r"lib[^/]*\.so(\.[0-9]+)*")
_LDCONFIG_LINE = re.compile(r"^\s+(\S+\.so[^\s]*)\s+\(")


def provides_libraries(name: str) -> bool:
    """Whether kvenv records the libraries of the distribution ``name`` (torch, nvidia-*)."""
    key = canonicalize_name(name)
    return key == "torch" or key.startswith("nvidia-")


def parse_ldconfig(text: str) -> list[str]:
    """The library names ``ldconfig -p`` lists, sorted and unique."""
    found = set()
    for line in text.splitlines():
        match = _LDCONFIG_LINE.match(line)
        if match:
            found.add(match.group(1))
    return sorted(found)


def record_libraries(text: str) -> list[str]:
    """The shared libraries a ``RECORD`` lists, by file name, sorted and unique."""
    found = set()
    for line in text.splitlines():
        path = line.split(",", 1)[0].strip().strip('"')
        name = path.rsplit("/", 1)[-1]
        if _LIBRARY.fullmatch(name):
            found.add(name)
    return sorted(found)


def _record_text(dist: Distribution, effects: Effects) -> str | None:
    if dist.location is None or dist.version is None:
        return None
    stem = re.sub(r"[-_.]+", "_", dist.name)
    for name in dict.fromkeys((stem, stem.lower())):
        text = effects.read_text(f"{dist.location}/{name}-{dist.version}.dist-info/RECORD")
        if text is not None:
            return text
    return None


def probe_libraries(effects: Effects, distributions: Sequence[Distribution]) -> LibraryInfo | None:
    """What the loader's cache and the host's torch and ``nvidia-*`` distributions provide;
    None when neither could be read."""
    system = None
    ldconfig = effects.which("ldconfig") or (
        "/sbin/ldconfig" if effects.exists("/sbin/ldconfig") else None
    )
    if ldconfig is not None:
        result = effects.run([ldconfig, "-p"], 10.0)
        if result is not None and result.returncode == 0:
            system = parse_ldconfig(result.stdout)
    packages: dict[str, list[str]] = {}
    for dist in distributions:
        if not provides_libraries(dist.name):
            continue
        text = _record_text(dist, effects)
        libraries = record_libraries(text) if text is not None else []
        if libraries:
            packages[str(canonicalize_name(dist.name))] = libraries
    if system is None and not packages:
        return None
    return LibraryInfo(system=system, packages=packages)
