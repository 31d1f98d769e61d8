"""Which Python interpreter is "the host": one rule, resolved the same way by every command.

In order: ``--python``, ``$KVENV_PYTHON``, the profile's ``[host] python``, the active virtual
environment (``$VIRTUAL_ENV/bin/python``) or conda environment (``$CONDA_PREFIX/bin/python``),
``python3`` on ``PATH``; kvenv's own interpreter only when none of these exists, and then the
result says so. An interpreter that is *named* (the flag, the variable, the profile) and does
not exist is an error naming where it came from; the environments and ``PATH`` are only
consulted. Pure: the environment, the file checks and ``which`` are passed in.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping

from kvenv.errors import InputError

__all__ = [
    "ENV_PYTHON",
    "RECORDED_SOURCE",
    "HostPython",
    "judged_host_python",
    "resolve_host_python",
]

ENV_PYTHON = "KVENV_PYTHON"


class HostPython:
    """The host interpreter's path and where that choice came from (a plain immutable
    record: ``kvenv apply``'s no-op path imports no attrs)."""

    __slots__ = ("note", "own", "path", "source")
    path: str
    source: str  # "--python", "$KVENV_PYTHON", "the profile's [host] python", ...
    own: bool  # kvenv's own interpreter (probe in process)
    note: str | None  # said when kvenv fell back to its own interpreter

    def __init__(self, path: str, source: str, own: bool = False, note: str | None = None):
        for name, value in (("path", path), ("source", source), ("own", own), ("note", note)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HostPython is immutable: cannot set {name}")

    def _key(self) -> tuple[str, str, bool, str | None]:
        return (self.path, self.source, self.own, self.note)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostPython) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"HostPython(path={self.path!r}, source={self.source!r}, own={self.own!r}, "
            f"note={self.note!r})"
        )

    def describe(self) -> str:
        return f"{self.path} (from {self.source})"


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def resolve_host_python(
    *,
    flag: str | None,
    environ: Mapping[str, str],
    profile_value: str | None = None,
    profile_file: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    runnable: Callable[[str], bool] = _runnable,
    own: str = sys.executable,
) -> HostPython:
    """The host interpreter by the rule above. ``profile_value`` is the profile's
    ``[host] python`` already resolved against the profile (``profile_file`` names it)."""
    named: list[tuple[str | None, str, str]] = [
        (flag, "--python", "pass an existing python to --python"),
        (
            environ.get(ENV_PYTHON),
            f"${ENV_PYTHON}",
            f"set {ENV_PYTHON} to an existing python, or unset it",
        ),
        (
            profile_value,
            "the profile's [host] python" + (f" ({profile_file})" if profile_file else ""),
            "set [host] python to an existing interpreter (e.g. /usr/bin/python3)",
        ),
    ]
    for value, source, fix in named:
        if value is None:
            continue
        if value == "":
            raise InputError(f"the host interpreter from {source} is empty", hint=fix)
        path = value if os.sep in value else which(value)
        if path is None or not runnable(path):
            raise InputError(
                f"the host interpreter {value} (from {source}) does not exist or is not executable",
                hint=fix,
            )
        return _host(os.path.abspath(path), source, own)
    for variable in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        prefix = environ.get(variable)
        if prefix:
            path = os.path.join(prefix, "bin", "python")
            if runnable(path):
                return _host(os.path.abspath(path), f"the active environment ${variable}", own)
    found = which("python3")
    if found is not None and runnable(found):
        return _host(os.path.abspath(found), "python3 on PATH", own)
    return HostPython(
        own,
        "kvenv's own interpreter",
        own=True,
        note=(
            f"no host interpreter found (no --python, ${ENV_PYTHON}, [host] python, active "
            f"environment or python3 on PATH): using kvenv's own, {own}"
        ),
    )


RECORDED_SOURCE = "the current generation's manifest"


def judged_host_python(python: HostPython, recorded: str | None, *, flag: bool) -> HostPython:
    """The host interpreter that ``verify``, ``status`` and ``doctor`` judge an applied
    generation against: the one its manifest records (``recorded``) unless ``--python``
    (``flag``) names another, which ``python`` (:func:`kvenv.env.place.host_python_of`) then
    is, with a note that it differs from the recorded one. A recorded interpreter that no
    longer exists is replaced by ``python``, with a note saying so. Nothing recorded (nothing
    applied, an older manifest): ``python`` as it is. (``list`` shows the recorded one.)"""
    if recorded is None or (python.path == recorded and not python.note):
        return python
    if flag:
        if python.path == recorded:
            return python
        note = (
            f"--python {python.path} differs from the interpreter the current generation was "
            f"applied for, {recorded}: judging {python.path}"
        )
        return HostPython(python.path, python.source, python.own, note)
    if os.path.isfile(recorded) and os.access(recorded, os.X_OK):
        return HostPython(recorded, RECORDED_SOURCE, recorded == os.path.abspath(sys.executable))
    note = (
        f"the interpreter the current generation was applied for, {recorded}, is gone: judging "
        f"{python.path} (from {python.source}); `kvenv apply` rebuilds the generation for it"
    )
    return HostPython(python.path, python.source, python.own, note)


def _host(path: str, source: str, own: str) -> HostPython:
    return HostPython(path, source, own=path == os.path.abspath(own))
