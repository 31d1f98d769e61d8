"""Activating an applied generation: for a shell (``kvenv activate``) or in-process
(``kvenv.activate()``). Never downloads or installs anything.

Import order: the overlay, then the native dir, ahead of the host's site-packages, so the
overlay wins over host copies but never over a protected package (none can be in those dirs:
that is checked on every activation). ``.pth`` files in those dirs are read when the generation
is built, never at activation: their path lines are expanded into the manifest's
``pythonpath`` (so shells get them) and their ``import`` lines recorded as ``pth_imports``.
Activation adds paths and executes nothing it finds in the directories: a shell or ``kvenv
run`` puts them on ``PYTHONPATH`` (whose entries are not site dirs: Python processes no
``.pth`` there), and :func:`activate_in_process` puts them on ``sys.path`` (no
``site.addsitedir``) and runs only the ``import`` lines the manifest lists as the wheels'
allowed ones (``executable_pth``: ``[[overlay.allow_pth]]``). A ``.pth`` planted in a
generation later is never executed by any activation (``verify`` reports it as added). PATH
gets the generation's ``bin``; LD_LIBRARY_PATH the host torch's ``lib`` and the driver/CUDA
library dirs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kvenv._util import memo
from kvenv.env.manifest import Activation, Manifest, path_inside
from kvenv.env.shellrender import DEACTIVATE as DEACTIVATE
from kvenv.env.shellrender import SHELLS as SHELLS
from kvenv.env.shellrender import STATE_NAMES as STATE_NAMES
from kvenv.env.shellrender import STATE_OLD as STATE_OLD
from kvenv.env.shellrender import activated_environ as activated_environ
from kvenv.env.shellrender import activation_values as activation_values
from kvenv.env.shellrender import deactivated_environ as deactivated_environ
from kvenv.env.shellrender import render as render
from kvenv.env.shellrender import render_deactivate as render_deactivate
from kvenv.env.shellrender import shim_texts_for
from kvenv.errors import InputError, IntegrityError, RuntimeNotReady

if TYPE_CHECKING:  # activation is on the hot path: import only what it runs
    from kvenv.env.place import Place
    from kvenv.model.locations import Locations
    from kvenv.model.snapshot import HostSnapshot

DEFAULT_DRIVER_DIRS = ("/usr/local/nvidia/lib64", "/usr/local/cuda/lib64")
ENV_ACTIVE = "KVENV_ACTIVE_GENERATION"
_ACTIVATED: set[str] = set()  # generations whose .pth import lines ran in this process


def read_pth_files(site_dir: Path, generation: Path) -> tuple[list[str], list[str], list[str]]:
    """The ``.pth`` files of ``site_dir`` as ``site`` would process them (sorted by name):
    (path lines inside the generation, import lines, notes about lines that were dropped)."""
    paths: list[str] = []
    imports: list[str] = []
    notes: list[str] = []
    if not site_dir.is_dir():
        return paths, imports, notes
    for pth in sorted(p for p in site_dir.iterdir() if p.name.endswith(".pth")):
        if pth.name.startswith("."):
            continue
        try:
            lines = pth.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            notes.append(f"{pth.name}: unreadable, skipped")
            continue
        for line in lines:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith(("import ", "import\t")):
                imports.append(stripped)
                continue
            full = os.path.normpath(os.path.join(site_dir, stripped))
            if not path_inside(full, str(generation)):
                notes.append(f"{pth.name}: path {stripped!r} is outside the generation, ignored")
            elif os.path.isdir(full) and full not in paths:
                paths.append(full)
    return paths, imports, notes


def shadowing_entry(dirs: Iterable[Path], protected: Iterable[str]) -> Path | None:
    """The first entry of ``dirs`` whose import name is one of the ``protected``
    distributions', or None. Each directory's entries are noted for the memo (``listing``:
    a record of an activation holds while no entry is added or removed)."""
    from kvenv._util.importnames import import_name_of, protected_import_names

    names = protected_import_names(protected)
    for directory in dirs:
        memo.note("listing", str(directory))  # before it is read: a later change is seen
        if not directory.is_dir():
            continue
        for child in directory.iterdir():
            if import_name_of(child.name) in names:
                return child
    return None


def check_not_shadowing(dirs: Iterable[Path], protected: Iterable[str]) -> None:
    """Refuse activation when a protected import name exists in one of ``dirs``."""
    child = shadowing_entry(dirs, protected)
    if child is not None:
        raise IntegrityError(
            f"{child} would shadow the protected host package {child.name!r}",
            hint="remove it (`{kvenv reset --yes}`, then `{kvenv apply}`); protected "
            "packages come from the host only",
        )


def host_library_dirs(host: HostSnapshot | None) -> list[str]:
    """The host torch's ``lib`` dir, then the driver and CUDA library dirs."""
    out: list[str] = []
    if host is not None and host.torch is not None and host.torch.location:
        location = host.torch.location
        if location.endswith(".py"):
            location = os.path.dirname(location)
        out.append(os.path.join(location, "lib"))
    candidates: Sequence[str] = DEFAULT_DRIVER_DIRS
    if host is not None and host.cuda is not None and host.cuda.library_dirs:
        candidates = [*host.cuda.library_dirs, *DEFAULT_DRIVER_DIRS]
    for directory in candidates:
        if directory not in out and os.path.isdir(directory):
            out.append(directory)
    return out


def build_activation(
    *,
    generation: Path,
    overlay: Path,
    native: Path,
    bin_dir: Path,
    host: HostSnapshot | None,
    env: Mapping[str, str],
    protected: Iterable[str],
) -> tuple[Activation, list[str]]:
    """The activation of a freshly built generation, and notes about ``.pth`` lines."""
    protected = tuple(protected)
    check_not_shadowing((overlay, native), protected)
    pythonpath: list[str] = []
    imports: list[str] = []
    notes: list[str] = []
    for site_dir in (overlay, native):
        pythonpath.append(str(site_dir))
        extra, hooks, dropped = read_pth_files(site_dir, generation)
        pythonpath.extend(p for p in extra if p not in pythonpath)
        imports.extend(hooks)
        notes.extend(dropped)
    from kvenv.env.kvenvlib import lib_dir

    lib = lib_dir(generation)
    if lib is not None:  # kvenv's own package, last: it shadows nothing (kvenv.env.kvenvlib)
        pythonpath.append(str(lib))
    activation = Activation(
        pythonpath=pythonpath,
        path=[str(bin_dir)],
        ld_library_path=host_library_dirs(host),
        env=dict(env),
        pth_imports=imports,
        site_dirs=[str(overlay), str(native)],
    )
    return activation, notes


def activation_for(manifest: Manifest, host: HostSnapshot | None = None) -> Activation:
    """The activation of an applied generation, checked: its dirs exist and shadow nothing
    protected (noted for the memo: ``isdir``, ``listing``). With ``host``, the library dirs
    are taken from it afresh."""
    for directory in (manifest.dirs.overlay, manifest.dirs.native):
        memo.note("isdir", directory)
    missing = [d for d in (manifest.dirs.overlay, manifest.dirs.native) if not os.path.isdir(d)]
    if missing:
        raise RuntimeNotReady(
            f"runtime paths from the manifest are unavailable: {', '.join(missing)}",
            hint="rebuild it: `{kvenv apply --repair}`",
        )
    check_not_shadowing(
        (Path(manifest.dirs.overlay), Path(manifest.dirs.native)), manifest.protected
    )
    import attrs

    from kvenv.env.shellrender import path_with_interpreter

    activation = manifest.activation
    path = path_with_interpreter(activation.path, manifest.python)
    if path != activation.path:
        activation = attrs.evolve(activation, path=path)
    if host is not None:
        activation = attrs.evolve(activation, ld_library_path=host_library_dirs(host))
    return activation


def activation_differences(
    manifest: Manifest,
    env: Mapping[str, str],
    host: HostSnapshot | None,
    *,
    same_profile: bool,
    allowed_env: Iterable[str] = (),
) -> list[str]:
    """How the manifest's activation differs from what activation would emit for this
    generation: its dirs and ``.pth`` files read afresh, ``env`` (the profile's
    ``[runtime.env]``: compared exactly when ``same_profile``, else only its loader-changing
    names against ``allowed_env``), and library dirs among those of the host (``host``, the
    host packages the manifest recorded, the driver and CUDA dirs). One sentence each."""
    from kvenv.model.profile import loads_code

    dirs = manifest.dirs
    try:
        fresh, _ = build_activation(
            generation=Path(dirs.native).parent,
            overlay=Path(dirs.overlay),
            native=Path(dirs.native),
            bin_dir=Path(dirs.bin),
            host=host,
            env=env,
            protected=(),
        )
    except OSError as exc:
        return [f"cannot read the generation's directories: {exc}"]
    have = manifest.activation
    out: list[str] = []
    for field in ("pythonpath", "path", "site_dirs", "pth_imports"):
        recorded, computed = getattr(have, field), getattr(fresh, field)
        if recorded != computed:
            extra = [e for e in recorded if e not in computed]
            shown = f" (not computed: {', '.join(map(repr, extra[:3]))})" if extra else ""
            out.append(f"activation.{field} differs from what the generation gives{shown}")
    libraries = set(fresh.ld_library_path) | set(DEFAULT_DRIVER_DIRS) | _recorded_libs(manifest)
    if host is not None and host.cuda is not None:
        libraries |= set(host.cuda.library_dirs or ())
    for entry in have.ld_library_path:
        if entry not in libraries:
            out.append(
                f"activation.ld_library_path entry {entry!r} is none of the host's library dirs"
            )
    allowed = set(allowed_env)
    for name, value in sorted(have.env.items()):
        if same_profile and env.get(name) != value:
            out.append(f"activation.env.{name} is not the profile's [runtime.env] {name}")
        elif not same_profile and loads_code(name) and name not in allowed:
            out.append(f"activation.env.{name} changes how processes load code; not allowed")
    if same_profile:
        out.extend(
            f"activation.env.{name} of the profile's [runtime.env] is missing"
            for name in sorted(set(env) - set(have.env))
        )
    return out


def _recorded_libs(manifest: Manifest) -> set[str]:
    """The ``lib`` dirs of the host torch recorded in the manifest (as the package dir, or as
    the site dir that holds it)."""
    out: set[str] = set()
    for package in manifest.host_protected:
        if package.location:
            base = package.location
            if base.endswith(".py"):
                base = os.path.dirname(base)
            out |= {os.path.join(base, "lib"), os.path.join(base, package.name, "lib")}
    return out


# -- rendering (kvenv.env.shellrender) ---------------------------------------------------


@attrs.frozen
class ShellHook:
    """What ``kvenv activate --shell json`` prints (``schemas/activation.schema.json``):
    ``prepend`` (entries put in front of each path variable), ``set`` (the variables set),
    ``pth_imports`` (the ``.pth`` import lines a Python process runs), and
    ``environment_variables``: the final value of every variable activation sets, computed
    over the environment kvenv ran in (a previous kvenv activation in it undone first)."""

    prepend: dict[str, list[str]]
    set: dict[str, str]
    pth_imports: list[str]
    environment_variables: dict[str, str]


# -- activation scripts of a root ---------------------------------------------------------


def shim_texts(locations: Locations, manifest: Manifest) -> dict[Path, str]:
    """``<root>/activate.{sh,fish,ps1}`` and their text for the generation of ``manifest``
    (its activation as :func:`activation_for` gives it: the host interpreter's directory on
    ``PATH``)."""
    import attrs

    from kvenv.env.shellrender import path_with_interpreter

    path = path_with_interpreter(manifest.activation.path, manifest.python)
    activation = attrs.evolve(manifest.activation, path=path)
    return shim_texts_for(locations.root, manifest.generation, activation)


def shims_current(locations: Locations, manifest: Manifest) -> bool:
    """Whether the activation scripts are exactly what :func:`write_shims` would write."""
    for path, text in shim_texts(locations, manifest).items():
        try:
            if memo.read_bytes(path).decode("utf-8") != text:
                return False
        except (OSError, UnicodeDecodeError):
            return False
    return True


def write_shims(locations: Locations, manifest: Manifest) -> None:
    """Write the activation scripts for the current generation (each replaced atomically;
    unchanged files are left alone)."""
    for path, text in shim_texts(locations, manifest).items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        from kvenv._util import atomic

        atomic.write_text(path, text, durable=False)


# -- in-process --------------------------------------------------------------------------------


def locate_manifest(
    profile: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
) -> Path | None:
    """The manifest to activate: the argument, ``$KVENV_MANIFEST``, else the current
    generation of the profile's runtime root. None when nothing was applied."""
    return _locate(profile, manifest, root=root)[0]


def _locate(
    profile: str | None,
    manifest: str | os.PathLike[str] | None,
    *,
    root: str | os.PathLike[str] | None = None,
) -> tuple[Path | None, Place | None]:
    """:func:`locate_manifest`, and the place it looked in (None for a given manifest)."""
    from kvenv.model.locations import ENV_MANIFEST

    if manifest is not None:
        return Path(manifest), None
    if profile is None and root is None and os.environ.get(ENV_MANIFEST):
        return Path(os.environ[ENV_MANIFEST]), None
    from kvenv.env.place import find_place  # the CLI's resolver (docs/places.md)

    place = find_place(profile, root=os.fspath(root) if root else None)
    place.check_owner()
    return place.current_manifest_path(), place


def _warn_not_applied(place: Place) -> None:
    """A :class:`~kvenv.errors.NotAppliedWarning` naming the profile, its root and the command
    that applies it, pointed at the caller outside kvenv."""
    import warnings

    from kvenv.env.liveimports import _caller_level
    from kvenv.errors import NotAppliedWarning
    from kvenv.model.locations import FROM_DEFAULT

    loaded = place.loaded
    name = loaded.profile.name
    argument = name if loaded.origin == "builtin" else str(loaded.path)
    command = f"kvenv apply {argument}"
    if place.locations.root_from != FROM_DEFAULT:
        command += f" --root {place.locations.root}"
    warnings.warn(
        f"nothing is applied for profile {name!r} in {place.locations.root} "
        f"({place.locations.root_from}): kvenv.activate() changed nothing and returns False. "
        f"Fix: run `{command}` first (in a notebook: `!{command}`), then activate again.",
        NotAppliedWarning,
        stacklevel=_caller_level(),
    )


def _run_pth_imports(loaded: Manifest) -> None:
    """Run the ``.pth`` import lines of the generation that the manifest lists as its wheels'
    (allowed) ones, in the activation's order, as ``site`` would (each line executed, a
    failing one reported and skipped). Nothing is read from the directories."""
    allowed = {hook.line.strip() for hook in loaded.executable_pth}
    for line in loaded.activation.pth_imports:
        if line.strip() not in allowed:
            continue  # not a line a wheel of the manifest ships: never run
        try:
            exec(line)  # what site.addpackage does with such a line
        except Exception as exc:
            import warnings

            from kvenv.errors import KvenvWarning

            warnings.warn(
                f"a .pth import line of the generation failed ({line!r}): {exc}",
                KvenvWarning,
                stacklevel=2,
            )


def _prepend_env(name: str, entries: Sequence[str]) -> None:
    current = [e for e in os.environ.get(name, "").split(os.pathsep) if e]
    merged = list(entries) + [e for e in current if e not in entries]
    os.environ[name] = os.pathsep.join(merged)


def activate_in_process(
    profile: str | None = None,
    manifest: str | os.PathLike[str] | None = None,
    *,
    strict: bool = False,
    check_imports: bool = True,
    warn_not_applied: bool = True,
) -> bool:
    """Activate an applied generation in this interpreter and, through ``os.environ``, in its
    child processes. False when nothing was applied (with a
    :class:`~kvenv.errors.NotAppliedWarning` naming the profile, its root and the command that
    applies it, unless ``warn_not_applied`` is False); :class:`KvenvError` when it is broken.

    The overlay's modules this process already imported at another version are reported
    first (:func:`kvenv.env.liveimports.check_live_imports`): a warning each, or with
    ``strict`` a :class:`~kvenv.errors.ConflictError` before anything is changed.
    ``check_imports=False`` skips that, for a process that activates only to start others
    (``kvenv serve``). Paths are added, nothing in the directories is executed (see the
    module docstring)."""
    import importlib

    from kvenv.env.manifest import read_manifest

    path, place = _locate(profile, manifest)
    if path is None or (not path.exists() and manifest is None):
        if place is not None and warn_not_applied:
            _warn_not_applied(place)
        return False
    if not path.exists():
        raise InputError(f"manifest not found: {path}", hint="run `{kvenv apply}` first")
    from kvenv.env.root import check_manifest_file

    check_manifest_file(path.absolute())
    loaded = read_manifest(path)
    activation = activation_for(loaded)
    if check_imports:
        from kvenv.env.liveimports import check_live_imports

        check_live_imports(loaded, strict=strict)
    front = list(activation.pythonpath)  # the .pth path lines were expanded at apply
    sys.path[:] = front + [p for p in sys.path if p not in front]
    if loaded.generation not in _ACTIVATED:
        _ACTIVATED.add(loaded.generation)
        _run_pth_imports(loaded)
    for name, entries in (
        ("PYTHONPATH", activation.pythonpath),
        ("PATH", activation.path),
        ("LD_LIBRARY_PATH", activation.ld_library_path),
    ):
        if entries:
            _prepend_env(name, entries)
    for key, value in activation.env.items():
        os.environ[key] = value
    os.environ["KVENV_MANIFEST"] = str(path)
    os.environ[ENV_ACTIVE] = loaded.generation
    importlib.invalidate_caches()
    return True
