"""The probed Python: its identity, ABI, ordered wheel tags and import path.

The facts come from :mod:`kvenv.probe.child`, imported here for the interpreter kvenv runs
in, or run as ``python -I -c <child source>`` for another one. Wheel tags are then computed
here with ``packaging.tags`` from those facts (the other interpreter need not have
``packaging``); platform tags are the machine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import jsonio
from kvenv._util import memo as memos
from kvenv.errors import InputError
from kvenv.model.fields import NonEmpty
from kvenv.model.snapshot import PythonInfo
from kvenv.probe import child
from kvenv.probe.effects import Effects
from kvenv.probe.hostmemo import interpreter_deps, interpreter_key

PROBE_TIMEOUT = 60.0
SHORT_NAMES = {"cpython": "cp", "pypy": "pp", "ironpython": "ip", "jython": "jy"}


@attrs.frozen
class Interpreter:
    """What the child reported, checked."""

    version: str
    major: int
    minor: int
    implementation: str
    nodot: str
    abis: tuple[str, ...]
    executable: str
    sys_path: tuple[str, ...]
    sys_platform: str
    machine: str
    sysconfig_platform: str


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def interpreter_from_facts(data: Mapping[str, Any], *, source: str) -> Interpreter:
    """Check the child's JSON; a malformed answer is an :class:`InputError` naming ``source``."""
    version_info = data.get("version_info")
    texts = {k: data.get(k) for k in ("version", "implementation", "executable", "sys_platform")}
    abis, sys_path = _strings(data.get("abis")), _strings(data.get("sys_path"))
    ok = (
        isinstance(version_info, list)
        and len(version_info) == 2
        and all(isinstance(v, int) for v in version_info)
        and all(isinstance(v, str) and v for v in texts.values())
        and abis is not None
        and sys_path is not None
    )
    if not ok or abis is None or sys_path is None or not isinstance(version_info, list):
        raise InputError(f"the interpreter probe of {source} returned unexpected data")
    major, minor = version_info
    nodot = str(data.get("py_version_nodot") or f"{major}{minor}")
    return Interpreter(
        version=str(texts["version"]),
        major=major,
        minor=minor,
        implementation=str(texts["implementation"]),
        nodot=nodot,
        abis=abis,
        executable=str(texts["executable"]),
        sys_path=sys_path,
        sys_platform=str(texts["sys_platform"]),
        machine=str(data.get("machine") or "unknown"),
        sysconfig_platform=str(data.get("sysconfig_platform") or ""),
    )


def local_interpreter() -> Interpreter:
    return interpreter_from_facts(child.facts(), source="this interpreter")


def remote_interpreter(python: str, effects: Effects, *, memo: Path | None = None) -> Interpreter:
    """Run the child probe in ``python`` (isolated, from ``/``) and read its JSON line.

    With ``memo`` (the memo root), the answer of a native interpreter binary is kept as the
    memo kind ``interpreter`` and reused, without running anything, while what it depends on
    is unchanged (:func:`kvenv.probe.hostmemo.interpreter_deps`): the facts of ``python -I``
    are fixed by its binary, its ``pyvenv.cfg`` and the directories of its import path (a new
    ``.pth`` changes its directory). Scripts (a pyenv shim, a wrapper) choose their
    interpreter at run time and are always run. The host's distributions are never
    memoized: they are read afresh by every probe (:mod:`kvenv.probe.dists`)."""
    if memo is not None:
        try:
            return interpreter_from_facts(_remembered(python, memo), source=python)
        except (InputError, AttributeError, TypeError):
            pass  # none kept (or not one this kvenv writes): probed
    data = _run_probe(python, effects)
    found = interpreter_from_facts(data, source=python)
    deps = interpreter_deps(python, found.sys_path) if memo is not None else None
    if memo is not None and deps is not None:  # the child's answer, as it gave it
        memos.put(memo, "interpreter", interpreter_key(python), deps, data)
    return found


def _remembered(python: str, memo: Path) -> Any:
    return memos.get(memo, "interpreter", interpreter_key(python))


def remembered_sys_path(python: str, memo: Path | None) -> list[str] | None:
    """The import path kept for ``python`` under the memo root ``memo``, if any (checked)."""
    try:
        found = _strings(_remembered(python, memo)["sys_path"]) if memo is not None else None
    except (KeyError, TypeError):
        return None
    return None if found is None else list(found)


def _run_probe(python: str, effects: Effects) -> dict[str, Any]:
    # through its loader: a file, or a member of a single-file bundle's zip (kvenv.fetch.pyz)
    import pkgutil

    raw = pkgutil.get_data(child.__name__.rpartition(".")[0], "child.py")
    source = (raw or b"").decode("utf-8")
    result = effects.run([python, "-I", "-c", source], PROBE_TIMEOUT)
    if result is None:
        raise InputError(
            f"cannot run the Python interpreter {python}",
            hint="give the path of an existing, executable python (e.g. /usr/bin/python3)",
        )
    lines = result.stdout.strip().splitlines()
    try:
        data = (
            jsonio.loads_json(lines[-1], file=python) if result.returncode == 0 and lines else None
        )
    except ValueError:  # malformed, or nested too deeply
        data = None
    if not isinstance(data, dict):
        last = (result.text.splitlines() or ["no output"])[-1]
        raise InputError(
            f"the interpreter probe failed in {python} (exit {result.returncode}): {last}",
            hint="check that it is a Python 3 interpreter",
        )
    return data


def wheel_tags(interp: Interpreter, platforms: list[str]) -> list[str]:
    """The interpreter's supported wheel tags, most preferred first (as ``sys_tags``)."""
    from packaging import tags

    short = SHORT_NAMES.get(interp.implementation, interp.implementation)
    version = (interp.major, interp.minor)
    found: list[tags.Tag] = []
    if short == "cp":
        found += tags.cpython_tags(version, list(interp.abis), platforms)
        compatible = "cp" + interp.nodot
    else:
        found += tags.generic_tags(f"{short}{interp.nodot}", list(interp.abis), platforms)
        compatible = "pp3" if short == "pp" else ""
    found += tags.compatible_tags(version, compatible or None, platforms)
    return [str(tag) for tag in found]


def machine_platforms() -> list[str]:
    from packaging import tags

    return list(tags.platform_tags())


def python_info(interp: Interpreter, platforms: list[str]) -> PythonInfo:
    return PythonInfo(
        version=NonEmpty(interp.version),
        implementation=NonEmpty(interp.implementation),
        abi=interp.abis[0] if interp.abis else None,
        tags=wheel_tags(interp, platforms),
        executable=interp.executable,
        sys_path=list(interp.sys_path),
    )
