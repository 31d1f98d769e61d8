"""Activation in real shells: evaluating it twice changes nothing, what the shell ends up with
is exactly :func:`activated_environ` (what ``kvenv run`` execs with), and ``kvenv_deactivate``
(or ``kvenv activate --undo``) gives back the environment byte for byte (``env -0`` before
and after, every variable). Shells that are not installed are skipped, saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kvenv.env.activation import activated_environ, deactivated_environ, render, render_deactivate
from kvenv.env.manifest import Activation
from kvenv.env.runenv import detect_shell, shell_of

NASTY = "/tmp/a dir/with 'quotes' $HOME `x` \"dq\" \\back"
ACTIVATION = Activation(
    pythonpath=[f"{NASTY}/overlay", "/r/native"],
    path=["/r/bin"],
    ld_library_path=["/host/torch/lib"],
    env={"VLLM_X": "it's $(not run)", "EMPTY": ""},
)
MANIFEST = "/r/generations/g/manifest.json"

# (shell name for render, executable, argv prefix to run a script file, how to source a file)
SHELLS = {
    "bash": (["bash", "--norc", "--noprofile"], ". {file}"),
    "zsh": (["zsh", "-f"], ". {file}"),
    "sh": (["dash"], ". {file}"),
    "fish": (["fish", "--no-config"], "source {file}"),
}

# Starting environments: a variable unset, set but empty, set; values with separators.
STARTS = {
    "unset": {"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    "empty": {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": "", "EMPTY": "x y"},
    "set": {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": "/old one:/old2",
        "LD_LIBRARY_PATH": "/l",
        "VLLM_X": "before",
        "KVENV_MANIFEST": "/elsewhere.json",
    },
}


def _env(blob: bytes) -> dict[str, str]:
    pairs = [entry.split("=", 1) for entry in blob.decode("utf-8").split("\0") if entry]
    return {name: value for name, value in pairs}


def _records(blob: bytes) -> list[bytes]:
    """``env -0`` output as its sorted records (shells may export in any order)."""
    return sorted(entry for entry in blob.split(b"\0") if entry)


def _need(shell: str) -> list[str]:
    argv, _ = SHELLS[shell]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed on this machine")
    return argv


def _run(shell: str, tmp_path: Path, start: dict[str, str], *, undo: str) -> list[bytes]:
    """env -0 before, after one activation, after a second one, after the undo."""
    argv = _need(shell)
    _, source = SHELLS[shell]
    activate = tmp_path / f"activate.{shell}"
    activate.write_text(render(ACTIVATION, shell, manifest_path=MANIFEST))
    deactivate = tmp_path / f"deactivate.{shell}"
    deactivate.write_text(render_deactivate(shell))
    undo_line = "kvenv_deactivate" if undo == "function" else source.format(file=deactivate)
    steps = [
        "env -0 > e0",
        source.format(file=activate),
        "env -0 > e1",
        source.format(file=activate),
        "env -0 > e2",
        undo_line,
        "env -0 > e3",
        "true",  # zsh execs a last command in place, and lowers SHLVL for it
    ]
    subprocess.run(
        [*argv, "-c", "; ".join(steps) if shell != "fish" else "\n".join(steps)],
        cwd=tmp_path,
        env=start,
        check=True,
        capture_output=True,
    )
    return [(tmp_path / f"e{i}").read_bytes() for i in range(4)]


@pytest.mark.parametrize("start", sorted(STARTS))
@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_activate_twice_then_deactivate_restores_env(
    shell: str, start: str, tmp_path: Path
) -> None:
    before, once, twice, after = _run(shell, tmp_path, STARTS[start], undo="function")
    assert _records(twice) == _records(once)  # idempotent: nothing duplicated
    assert _records(after) == _records(before)  # byte for byte
    # what the shell has is what kvenv run would exec with
    assert _env(once) == activated_environ(ACTIVATION, _env(before), manifest_path=MANIFEST)
    values = _env(once)
    assert values["PYTHONPATH"].split(":")[:2] == [f"{NASTY}/overlay", "/r/native"]
    assert values["PATH"].count("/r/bin") == 1
    assert values["VLLM_X"] == "it's $(not run)"


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_activate_undo_text_restores_env(shell: str, tmp_path: Path) -> None:
    before, _, _, after = _run(shell, tmp_path, STARTS["set"], undo="text")
    assert _records(after) == _records(before)


def test_python_model_roundtrip() -> None:
    for start in STARTS.values():
        once = activated_environ(ACTIVATION, start, manifest_path=MANIFEST)
        assert activated_environ(ACTIVATION, once, manifest_path=MANIFEST) == once
        assert deactivated_environ(once) == start
    # an empty PYTHONPATH adds no empty (current directory) entry
    once = activated_environ(ACTIVATION, STARTS["empty"])
    assert once["PYTHONPATH"] == f"{NASTY}/overlay:/r/native"
    assert once["_KVENV_OLD_PYTHONPATH"] == ""


def test_deactivate_ignores_hostile_recorded_names() -> None:
    environ = {"_KVENV_NAMES": "PATH $(touch x) ;rm", "PATH": "/new", "_KVENV_OLD_PATH": "/old"}
    assert deactivated_environ(environ) == {"PATH": "/old"}


def test_json_has_final_values(tmp_path: Path) -> None:
    import json

    start = STARTS["set"]
    data = json.loads(render(ACTIVATION, "json", manifest_path=MANIFEST, environ=start))
    assert set(data) == {"prepend", "set", "pth_imports", "environment_variables"}
    final = data["environment_variables"]
    assert final["PYTHONPATH"] == f"{NASTY}/overlay:/r/native:/old one:/old2"
    assert final["KVENV_MANIFEST"] == MANIFEST
    assert final["VLLM_X"] == "it's $(not run)"
    # over an activated environment, the same final values (the old activation undone)
    again = activated_environ(ACTIVATION, start, manifest_path=MANIFEST)
    data2 = json.loads(render(ACTIVATION, "json", manifest_path=MANIFEST, environ=again))
    assert data2["environment_variables"] == final


@pytest.mark.parametrize(
    ("parent", "shell_env", "expected"),
    [
        ("zsh", "/bin/bash", "zsh"),  # the parent process evaluates the output
        ("fish", None, "fish"),
        ("-bash", None, "bash"),
        ("python3", "/usr/bin/fish", "fish"),  # not a shell: $SHELL
        ("dash", "/bin/zsh", "sh"),
        ("pwsh", None, "pwsh"),
        (None, "/opt/tcsh", "bash"),  # neither known: bash
        (None, None, "bash"),
    ],
)
def test_detect_shell(parent: str | None, shell_env: str | None, expected: str) -> None:
    environ = {"SHELL": shell_env} if shell_env else {}
    assert detect_shell(environ, parent) == expected


def test_shell_of_names() -> None:
    assert shell_of("/usr/local/bin/zsh") == "zsh"
    assert shell_of("powershell.exe") == "pwsh"
    assert shell_of("python") is None
