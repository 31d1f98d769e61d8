"""The overlay against what a live process has already imported.

``kvenv.activate()`` in a notebook kernel often comes after ``import numpy`` or
``import transformers``: Python keeps a module it has imported, so a later activation cannot
replace it, and the process mixes the loaded version with the overlay's. Before activation
changes anything, :func:`check_live_imports` compares the top-level modules every distribution
of the generation provides (the manifest's ``top_level``) with ``sys.modules``: a module
loaded from files outside the generation at another version (or one that cannot be told) is a
:class:`LoadedClash`, issued as an :class:`~kvenv.errors.AlreadyImportedWarning`, or with
``strict`` raised as a :class:`~kvenv.errors.ConflictError` naming each module, both versions
and the fix. The fix fits the process: a restart in an interactive interpreter or kernel
(:func:`interactive`), activating first in a script. A process that activates only to start
others (``kvenv serve``: vLLM runs in a child) skips the check: nothing it imported matters
to the child (``activate_in_process(check_imports=False)``). A module loaded from the
generation itself (a second activation) or at the overlay's version is fine.

Only modules already in ``sys.modules`` cost anything, so the check is cheap on the
activation path; reading a loaded module's version reads one ``METADATA`` file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import FrameType, ModuleType
from typing import TYPE_CHECKING

import attrs

from kvenv._util.importnames import fold
from kvenv.env.manifest import path_inside
from kvenv.errors import AlreadyImportedWarning, ConflictError, Problem

if TYPE_CHECKING:
    from kvenv.env.manifest import Manifest

RESTART_FIX = (
    "restart the kernel (or the interpreter), then call kvenv.activate() before importing "
    "anything else"
)
SCRIPT_FIX = (
    "call kvenv.activate() at the top of the script, before anything imports these modules, "
    "or run it under `kvenv run PROFILE -- python SCRIPT`, which activates before Python starts"
)


def interactive() -> bool:
    """Whether this process is an interactive interpreter (a REPL, ``python -i``, an IPython
    or Jupyter kernel), where a restart is what the user can do; else a script."""
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return True
    # a kernel or an IPython shell has a running shell; a script that merely imported IPython
    # (nbclient, a test runner's plugin) has none
    getter = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return callable(getter) and getter() is not None


def fix_text() -> str:
    """The fix for a clash, as fits this process (:func:`interactive`)."""
    return RESTART_FIX if interactive() else SCRIPT_FIX


@attrs.frozen
class LoadedClash:
    """One overlay module already imported from other files at another version."""

    module: str
    distribution: str
    overlay_version: str
    loaded_version: str | None  # None: no distribution metadata and no __version__ found
    loaded_from: str | None  # None: a module without a file (built in, frozen)

    def brief(self) -> str:
        """``module (loaded V, overlay D V)``: one clash in a list."""
        return (
            f"{self.module} (loaded {self.loaded_version or 'an unknown version'}, the "
            f"overlay's {self.distribution} {self.overlay_version})"
        )

    def message(self) -> str:
        """One sentence: the module, what is loaded (version and path) and the overlay's."""
        version = self.loaded_version or "an unknown version"
        where = self.loaded_from or "no file (built in or frozen)"
        return (
            f"module {self.module!r} is already imported ({version}, from {where}); the "
            f"overlay provides {self.distribution} {self.overlay_version}, which this process "
            "cannot load any more: it keeps the imported copy and may mix the two versions"
        )


def module_location(module: ModuleType) -> str | None:
    """The file a module was loaded from, or a package's first directory; None without."""
    file = getattr(module, "__file__", None)
    if isinstance(file, str) and file:
        return file
    paths = getattr(module, "__path__", None)
    if paths is not None:
        for entry in paths:
            if isinstance(entry, str) and entry:
                return entry
    return None


def loaded_version(
    module: ModuleType, location: str | None, distribution: str, name: str
) -> str | None:
    """The version of ``distribution`` installed beside the loaded module ``name`` (its
    ``METADATA`` in the site dir holding it), else the module's ``__version__``, else None."""
    if location is not None:
        site_dir = location
        if os.path.basename(site_dir).startswith("__init__."):
            site_dir = os.path.dirname(site_dir)
        for _ in range(name.count(".") + 1):  # up from the module to its site dir
            site_dir = os.path.dirname(site_dir)
        version = _dist_info_version(site_dir, distribution)
        if version is not None:
            return version
    attribute = getattr(module, "__version__", None)
    return attribute if isinstance(attribute, str) and attribute else None


def _is_namespace(module: ModuleType) -> bool:
    return getattr(module, "__file__", None) is None and hasattr(module, "__path__")


def _imported(
    name: str, module: ModuleType, modules: Mapping[str, ModuleType], own: Sequence[str]
) -> list[tuple[str, ModuleType]]:
    """The modules to compare for the top-level ``name``: itself, or for a namespace package
    (which activation extends, as its path is recomputed) its imported children that the
    generation also has: ``google.protobuf`` of ``google``, not ``google.colab``."""
    if not _is_namespace(module):
        return [(name, module)]
    out: list[tuple[str, ModuleType]] = []
    prefix = name + "."
    for key in sorted(k for k in modules if k.startswith(prefix) and "." not in k[len(prefix) :]):
        child = key[len(prefix) :]
        for site_dir in own:
            base = os.path.join(site_dir, name, child)
            if os.path.isdir(base) or os.path.isfile(base + ".py"):
                out.append((key, modules[key]))
                break
    return out


def _dist_info_version(site_dir: str, distribution: str) -> str | None:
    try:
        names = os.listdir(site_dir)
    except OSError:
        return None
    wanted = fold(distribution)
    for name in sorted(names):
        if not name.endswith(".dist-info") or fold(name[:-10].split("-", 1)[0]) != wanted:
            continue
        try:
            with open(os.path.join(site_dir, name, "METADATA"), encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip() or None
                    if not line.strip():
                        break
        except (OSError, UnicodeDecodeError):
            continue
    return None


def loaded_clashes(
    manifest: Manifest, modules: Mapping[str, ModuleType] | None = None
) -> list[LoadedClash]:
    """The generation's top-level modules that ``modules`` (default ``sys.modules``) already
    holds from files outside the generation at another version, in the manifest's order."""
    if modules is None:
        modules = sys.modules
    own = (manifest.dirs.overlay, manifest.dirs.native)
    clashes: list[LoadedClash] = []
    seen: set[str] = set()
    for dist in manifest.distributions:
        for top in dist.top_level:
            found = modules.get(top)
            if found is None:
                continue
            for name, module in _imported(top, found, modules, own):
                if name in seen:
                    continue
                seen.add(name)
                location = module_location(module)
                if location is not None and _inside_any(location, own):
                    continue
                version = loaded_version(module, location, dist.name, name)
                from kvenv._util.versions import same_version  # packaging: only on a clash

                if version is not None and same_version(version, dist.version):
                    continue
                clashes.append(
                    LoadedClash(
                        module=name,
                        distribution=dist.name,
                        overlay_version=dist.version,
                        loaded_version=version,
                        loaded_from=location,
                    )
                )
    return clashes


def _inside_any(location: str, dirs: Iterable[str]) -> bool:
    real = os.path.realpath(location)
    return any(path_inside(location, d) or path_inside(real, os.path.realpath(d)) for d in dirs)


def check_live_imports(manifest: Manifest, *, strict: bool = False) -> list[LoadedClash]:
    """Warn (an :class:`AlreadyImportedWarning` per module) about the overlay's modules this
    process already imported at another version, and return them; with ``strict``, raise a
    :class:`ConflictError` naming them all instead, before activation changes anything."""
    clashes = loaded_clashes(manifest)
    if not clashes:
        return clashes
    fix = fix_text()
    if strict:
        if len(clashes) == 1:
            head = f"module {clashes[0].brief()} is"
        else:
            head = f"{len(clashes)} modules are: " + ", ".join(c.brief() for c in clashes) + ";"
        raise ConflictError(
            f"{head} already imported in this process at another version than the overlay's; "
            "activation would mix the two",
            problems=[Problem(c.message(), fix=fix) for c in clashes],
            hint=fix,
        )
    import warnings

    level = _caller_level()
    for clash in clashes:
        warnings.warn(f"{clash.message()}. Fix: {fix}.", AlreadyImportedWarning, stacklevel=level)
    return clashes


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside kvenv (the
    user's ``kvenv.activate()`` call, or whatever called kvenv's runtime)."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name == "kvenv" or name.startswith("kvenv.")):
            return level
        frame = frame.f_back
        level += 1
    return level
