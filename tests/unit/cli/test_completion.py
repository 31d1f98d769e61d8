"""``kvenv completion``: the scripts are loaded into real shells and asked for completions of
commands, flags, choices and profile names (bash always; fish and zsh where installed, skipped
saying so otherwise); ``shtab`` is never imported by other commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.cli import main

KVENV_BIN = Path(sys.executable).parent


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A directory with a profile of its own, so profile names come from the working
    directory as well as the built-in ones."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine-local.toml").write_text('schema = 1\nname = "mine-local"\n')
    return tmp_path


def _env() -> dict[str, str]:
    return {"PATH": f"{KVENV_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": os.environ["HOME"]}


def _bash_complete(script: Path, cwd: Path, *words: str) -> list[str]:
    program = (
        f"source {script}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n'
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}\n'
        "COMPREPLY=(); _shtab_kvenv\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program, "bash", *words],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_bash_completes_commands_flags_choices_and_profiles(
    project_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = project_dir / "kvenv.bash"
    script.write_text(_script("bash", capsys))
    assert _bash_complete(script, project_dir, "kvenv", "ro") == ["rollback"]
    commands = _bash_complete(script, project_dir, "kvenv", "")
    assert {"apply", "run", "shell", "list", "generations", "completion", "activate"} <= set(
        commands
    )
    assert "--keep" in _bash_complete(script, project_dir, "kvenv", "apply", "--")
    assert "--undo" in _bash_complete(script, project_dir, "kvenv", "activate", "--u")
    shells = _bash_complete(script, project_dir, "kvenv", "activate", "--shell", "")
    assert shells == ["bash", "zsh", "sh", "fish", "pwsh", "json"]
    profiles = _bash_complete(script, project_dir, "kvenv", "apply", "")
    assert {"demo", "mine-local"} <= set(profiles)
    assert _bash_complete(script, project_dir, "kvenv", "run", "mine") == ["mine-local"]


def test_fish_completes(project_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed on this machine")
    script = project_dir / "kvenv.fish"
    script.write_text(_script("fish", capsys))

    def complete(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            cwd=project_dir,
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert complete("kvenv ro") == ["rollback"]
    assert {"bash", "fish", "json"} <= set(complete("kvenv activate --shell "))
    assert "--keep" in complete("kvenv apply --")
    assert {"demo", "mine-local"} <= set(complete("kvenv shell "))


def test_zsh_registers(project_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed on this machine")
    functions = project_dir / "zfunc"
    functions.mkdir()
    (functions / "_kvenv").write_text(_script("zsh", capsys))
    done = subprocess.run(
        [
            "zsh",
            "-f",
            "-c",
            f"fpath=({functions} $fpath); autoload -U compinit; compinit -u; "
            "print -r -- ${_comps[kvenv]}",
        ],
        cwd=project_dir,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert done.stdout.splitlines()[0] == "_kvenv", done.stderr


def test_pwsh_script_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    text = _script("pwsh", capsys)
    assert "Register-ArgumentCompleter -Native -CommandName kvenv" in text
    for command in ("'run' = @{", "'rollback' = @{", "'--keep'"):
        assert command in text
    if shutil.which("pwsh"):
        done = subprocess.run(
            [
                "pwsh",
                "-NoProfile",
                "-Command",
                text + "\n(TabExpansion2 'kvenv ro' 8).CompletionMatches.CompletionText",
            ],
            capture_output=True,
            text=True,
            env=_env(),
        )
        assert done.stdout.split() == ["rollback"]


def test_profile_names_are_cheap_and_listed(
    project_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project_dir)
    assert main(["completion", "--profile-names"]) == 0
    names = capsys.readouterr().out.splitlines()
    assert "mine-local" in names and "demo" in names and names == sorted(names)


def test_other_commands_do_not_import_shtab() -> None:
    code = (
        "import sys\nfrom kvenv.cli import build_parser, main\n"
        "build_parser()\nmain(['--version'])\n"
        "assert 'shtab' not in sys.modules, 'shtab imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_no_shell_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion"]) == 2
    assert main(["completion", "tcsh"]) == 2
