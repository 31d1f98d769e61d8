"""``kvenv-lib``: kvenv's own package, exposed to the programs that run in a generation.

A script under ``kvenv run`` (or in an activated shell) runs on the host interpreter, which
need not have kvenv installed: kvenv usually lives in a venv of its own, and putting that venv's
site-packages on ``PYTHONPATH`` would shadow the host's packages (filelock, fsspec,
typing_extensions, ...). So each generation holds a directory ``kvenv-lib`` with a link to the
kvenv package that built it and links to those of the packages ``import kvenv.runtime`` needs
(:data:`RUNTIME_REQUIREMENTS`) that neither the host nor the generation provides; activation puts
it last on ``PYTHONPATH``, after the overlay and the native dir.

Nothing in it can shadow a host package: a requirement the host or the generation has is never
linked, and kvenv itself is not linked when the host has kvenv installed (the host's wins).
The links point into the environment of the kvenv that applied the generation: remove that
environment and ``import kvenv`` fails in the generation, nothing else.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from kvenv.env.rootfiles import KVENV_LIB

KVENV_DISTRIBUTION = "kvenv-overlay"
# What ``import kvenv.runtime`` and building an ``LLM`` (loading its profile) import from
# outside the standard library: distribution -> import names (tests/unit/env/test_kvenvlib.py
# checks this against the imports that actually happen).
RUNTIME_REQUIREMENTS: Mapping[str, tuple[str, ...]] = {
    "attrs": ("attr", "attrs"),
    "cattrs": ("cattrs",),
    "packaging": ("packaging",),
    "typing-extensions": ("typing_extensions",),
}

# Every name a link in ``kvenv-lib`` may have (kvenv.env.strays holds the directory to it).
LINKABLE = frozenset(
    ("kvenv", *(name for names in RUNTIME_REQUIREMENTS.values() for name in names))
)


def _location(import_name: str) -> Path | None:
    """Where this process imports ``import_name`` from: a package directory or a module file."""
    spec = importlib.util.find_spec(import_name)
    if spec is None or spec.origin is None or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def links_for(provided: Iterable[str]) -> tuple[dict[str, Path], list[str]]:
    """The links ``kvenv-lib`` gets (entry name -> target) when the host and the generation
    provide the distributions ``provided``, and notes about what could not be linked (what
    lies in an archive, as when kvenv runs as a single file, is said in one note)."""
    have = {canonicalize_name(n) for n in provided}
    links: dict[str, Path] = {}
    notes: list[str] = []
    archived: list[str] = []
    wanted: dict[str, tuple[str, ...]] = {}
    if KVENV_DISTRIBUTION not in have:
        wanted[KVENV_DISTRIBUTION] = ("kvenv",)
    wanted.update({d: names for d, names in RUNTIME_REQUIREMENTS.items() if d not in have})
    for dist, names in wanted.items():
        for name in names:
            target = _location(name)
            if target is None:
                notes.append(f"{KVENV_LIB}: {name} ({dist}) is not importable by kvenv itself")
                continue
            if not (target.is_dir() or target.suffix == ".py"):  # kvenv runs from a zip app
                archived.append(name)
                continue
            links[target.name] = target.resolve()
    if archived:
        notes.append(
            f"{KVENV_LIB}: {', '.join(archived)} not linked: kvenv runs from an archive (a "
            "single file); a program in the generation imports them only from the host"
        )
    return links, notes


def expose_kvenv(generation: Path, provided: Iterable[str]) -> list[str]:
    """Create ``generation/kvenv-lib`` with its links (see the module docstring); the notes."""
    links, notes = links_for(provided)
    lib = generation / KVENV_LIB
    lib.mkdir(exist_ok=True)
    for name, target in sorted(links.items()):
        link = lib / name
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=target.is_dir())
    return notes


def lib_dir(generation: Path) -> Path | None:
    """The generation's ``kvenv-lib``, if it has one (generations built before it had none)."""
    lib = generation / KVENV_LIB
    return lib if lib.is_dir() else None
