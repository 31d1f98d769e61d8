"""``kvenv run`` and ``kvenv shell`` against a really applied root, in real processes: the
command replaces kvenv (same pid, its exit status and signals are the caller's), sees exactly
the activated environment, and errors before the exec are exit 2. ``shell`` is driven in real
bash, zsh and fish (skipped, saying so, where one is not installed), and inside it activation
is idempotent and deactivation restores the environment byte for byte."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.activation import activated_environ, activation_for
from kvenv.env.manifest import read_manifest
from kvenv.env.root import current_manifest_path
from tests.support.applyenv import Project, apply, fake_host_site, host_snapshot, local_project
from tests.support.applyenv import locations as where_of

KVENV = [sys.executable, "-m", "kvenv"]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Path]:
    tmp = tmp_path_factory.mktemp("run")
    project = local_project(tmp / "proj")
    where = where_of(tmp)
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp)), where)
    assert result.status == "applied"
    return project, where.root


def _args(applied: tuple[Project, Path]) -> list[str]:
    project, root = applied
    return [str(project.profile_path), "--root", str(root)]


def _base_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "SYSTEMROOT")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    # a locale named, so that kvenv's interpreter does not coerce the C locale (PEP 538) and
    # add LC_CTYPE to what it runs (a shell started with `env -i` names none)
    env.setdefault("LANG", "C.UTF-8")
    return env


def _records(blob: bytes) -> dict[str, str]:
    pairs = [e.split("=", 1) for e in blob.decode().split("\0") if e]
    return {k: v for k, v in pairs}


def test_run_sees_the_activated_environment(applied: tuple[Project, Path]) -> None:
    env = _base_env()
    done = subprocess.run(
        [*KVENV, "run", *_args(applied), "--", "env", "-0"], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    path = current_manifest_path(applied[1])
    assert path is not None
    activation = activation_for(read_manifest(path))  # PATH: the host interpreter's dir too
    assert _records(done.stdout) == activated_environ(activation, env, manifest_path=str(path))


def test_run_imports_the_overlay_and_finds_console_scripts(applied: tuple[Project, Path]) -> None:
    code = "import helper, nativepkg; print(helper.V, nativepkg.VERSION)"
    done = subprocess.run(
        [*KVENV, "run", *_args(applied), "--", "python3", "-c", code],
        env=_base_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "helper-2.0 1.0\n"
    done = subprocess.run(
        [*KVENV, "run", *_args(applied), "--", "nativecli"],
        env=_base_env(),
        capture_output=True,
        text=True,
    )
    assert done.stdout == "native 1.0 helper-2.0\n", done.stderr


def test_run_replaces_kvenv_exit_code_and_signals(applied: tuple[Project, Path]) -> None:
    # the same process: no wrapper between the caller and the command
    proc = subprocess.Popen(
        [*KVENV, "run", *_args(applied), "--", "sh", "-c", "echo $$; exit 7"],
        env=_base_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert int(out) == proc.pid
    assert proc.returncode == 7
    # a signal sent to the pid kvenv started as reaches the command itself
    proc = subprocess.Popen(
        [*KVENV, "run", *_args(applied), "--", "sh", "-c", "echo ready; exec sleep 30"],
        env=_base_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    # arguments reach it untouched: no shell parses them
    done = subprocess.run(
        [*KVENV, "run", *_args(applied), "--", "printf", "%s|", "a b", "$HOME", "--", "-x"],
        env=_base_env(),
        capture_output=True,
        text=True,
    )
    assert done.stdout == "a b|$HOME|--|-x|"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (["--", "no-such-command-kvenv"], "command not found: no-such-command-kvenv"),
        (["--", "/nonexistent/x"], "command not found or not executable: /nonexistent/x"),
        ([], "the command must follow `--`"),
        (["--"], "no command given"),
    ],
)
def test_run_errors_before_exec_exit_2(
    applied: tuple[Project, Path], tail: list[str], message: str
) -> None:
    done = subprocess.run(
        [*KVENV, "run", *_args(applied), *tail], env=_base_env(), capture_output=True, text=True
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_run_with_nothing_applied_exit_2(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    done = subprocess.run(
        [*KVENV, "run", str(project.profile_path), "--root", str(tmp_path / "r"), "--", "true"],
        env=_base_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "nothing is applied" in done.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_starts_activated_and_activation_inside_is_idempotent(
    applied: tuple[Project, Path], shell: str, tmp_path: Path
) -> None:
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed on this machine")
    kvenv = " ".join(KVENV)
    args = " ".join(_args(applied))
    if shell == "fish":
        activate = f"{kvenv} activate {args} --shell fish | source"
    else:
        activate = f'eval "$({kvenv} activate {args} --shell {shell})"'
    script = "\n".join(
        [
            "env -0 > s0",
            activate,
            "env -0 > s1",
            "kvenv_deactivate",
            "env -0 > s2",
            f"{kvenv} run {args} -- env -0 > s3",
            "exit 5",
        ]
    )
    env = {**_base_env(), "SHELL": exe}  # a non-interactive shell: it reads the script
    done = subprocess.run(
        [*KVENV, "shell", *_args(applied)],
        input=script,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 5, done.stderr
    inside = (tmp_path / "s0").read_bytes()
    records = _records(inside)
    assert records["SHELL"] == exe
    path = current_manifest_path(applied[1])
    assert records["KVENV_MANIFEST"] == str(path)
    assert records["PYTHONPATH"].startswith(str(applied[1]))
    # activating again inside the activated shell changes nothing
    assert sorted((tmp_path / "s1").read_bytes().split(b"\0")) == sorted(inside.split(b"\0"))
    # deactivating gives back the environment the shell was started from
    deactivated = _records((tmp_path / "s2").read_bytes())
    for name in ("PYTHONPATH", "KVENV_MANIFEST", "_KVENV_NAMES"):
        assert name not in deactivated
    assert deactivated["PATH"] == env["PATH"]
    # `kvenv run` from inside the deactivated shell: the activated environment again
    ran = _records((tmp_path / "s3").read_bytes())
    assert ran["PYTHONPATH"] == records["PYTHONPATH"]
    assert ran["PATH"] == records["PATH"]


def test_run_with_a_manifest_file(applied: tuple[Project, Path]) -> None:
    path = current_manifest_path(applied[1])
    assert path is not None
    relative = os.path.relpath(path, applied[1])
    done = subprocess.run(
        [*KVENV, "run", "--manifest", relative, "--", "sh", "-c", 'echo "$KVENV_MANIFEST"'],
        cwd=applied[1],
        env=_base_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{path}\n"  # absolute: the command may run anywhere
