"""The interpreter probe: in-process, and in another interpreter via `python -I -c`."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest
from packaging import tags

from kvenv.errors import InputError
from kvenv.probe.effects import Effects, RunResult, live
from kvenv.probe.pyinfo import (
    interpreter_from_facts,
    local_interpreter,
    machine_platforms,
    remote_interpreter,
    wheel_tags,
)


def test_tags_equal_packaging_sys_tags() -> None:
    interp = local_interpreter()
    assert wheel_tags(interp, machine_platforms()) == [str(t) for t in tags.sys_tags()]


def test_local_facts() -> None:
    interp = local_interpreter()
    assert interp.version.startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert interp.implementation == sys.implementation.name
    assert interp.executable == sys.executable
    assert "" not in interp.sys_path


def test_other_interpreter_in_isolated_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "from-pythonpath"))
    monkeypatch.chdir(tmp_path)
    remote = remote_interpreter(sys.executable, live())
    local = local_interpreter()
    assert (remote.version, remote.abis, remote.implementation) == (
        local.version,
        local.abis,
        local.implementation,
    )
    assert not any("from-pythonpath" in entry for entry in remote.sys_path)
    assert str(tmp_path) not in remote.sys_path
    assert wheel_tags(remote, machine_platforms()) == [str(t) for t in tags.sys_tags()]


def test_missing_interpreter_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot run the Python interpreter"):
        remote_interpreter(str(tmp_path / "python9"), live())


def test_not_a_python_is_bad_input() -> None:
    quiet = attrs.evolve(Effects.recorded(), run=lambda argv, t: RunResult(0, "hello\n"))
    with pytest.raises(InputError, match="interpreter probe failed"):
        remote_interpreter("/bin/echo", quiet)
    broken = attrs.evolve(
        Effects.recorded(), run=lambda argv, t: RunResult(1, "", "SyntaxError: invalid syntax\n")
    )
    with pytest.raises(InputError, match=r"exit 1\): SyntaxError"):
        remote_interpreter("/usr/bin/python2", broken)


def test_malformed_facts_are_refused() -> None:
    with pytest.raises(InputError, match="unexpected data"):
        interpreter_from_facts({"version": "3.12.1"}, source="x")


def test_free_threaded_and_pypy_tags() -> None:
    base = local_interpreter()
    ft = attrs.evolve(base, major=3, minor=13, nodot="313", abis=("cp313t",))
    found = wheel_tags(ft, ["manylinux_2_17_x86_64", "linux_x86_64"])
    assert found[0] == "cp313-cp313t-manylinux_2_17_x86_64"
    assert "cp313-abi3-manylinux_2_17_x86_64" not in found  # abi3 is not for free-threaded
    assert found[-1] == "py30-none-any"
    pypy = attrs.evolve(base, implementation="pypy", nodot="310", abis=("pypy310_pp73",))
    found = wheel_tags(pypy, ["linux_x86_64"])
    assert found[0] == "pp310-pypy310_pp73-linux_x86_64"
    assert "pp3-none-any" in found
