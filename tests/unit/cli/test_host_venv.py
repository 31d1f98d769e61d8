"""kvenv in one venv, the host in another: every command talks about the host interpreter.

kvenv runs from this repository's venv (standing in for kvenv's own, installed like a CLI
tool); the host is a second venv made here, holding a small stand-in ``torch`` (protected). The
profile names the host with ``[host] python``. plan, apply, activate, a console script, verify
(which then sees a changed torch), status and doctor all run as subprocesses.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.applyenv import Project, native_wheel, write_project
from tests.support.wheels import build_wheel

REPO_ROOT = Path(__file__).resolve().parents[3]
TORCH = "2.13.0+cpu"
PROBE = "import sys\ndef main():\n    import torch\n    print(sys.executable, torch.__version__)\n"


def _host_venv(tmp_path: Path) -> Path:
    """A venv (no pip) with a stand-in torch installed by PyPA installer; its python."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    home = tmp_path / "host-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
    python = home / "bin" / "python"
    paths = json.loads(
        subprocess.run(
            [
                str(python),
                "-I",
                "-c",
                "import json,sysconfig;print(json.dumps(sysconfig.get_paths()))",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    torch = build_wheel(
        tmp_path / "host-wheels",
        "torch",
        TORCH,
        files={"torch/__init__.py": f"__version__ = {TORCH!r}\n", "torch/lib/.keep": ""},
    )
    scheme = {k: paths[k] for k in ("purelib", "platlib", "scripts", "data")}
    scheme["headers"] = paths["include"]
    with WheelFile.open(torch) as source:
        install(
            source,
            SchemeDictionaryDestination(scheme, str(python), "posix"),
            {"INSTALLER": b"tests"},
        )
    return python


def _project(tmp_path: Path, host_python: Path) -> Project:
    wheels = tmp_path / "proj" / "wheels"
    probe = build_wheel(
        wheels,
        "hostprobe",
        "1.0",
        files={"hostprobe/__init__.py": PROBE},
        entry_points={"hostprobe": "hostprobe:main"},
    )
    project = write_project(tmp_path / "proj", native=native_wheel(wheels), overlay=[probe])
    with project.profile_path.open("a") as stream:
        stream.write(f'[host]\npython = "{host_python}"\n')
    return project


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "VIRTUAL_ENV", "CONDA_", "PYTHON"))
    }
    env["HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(REPO_ROOT)  # this checkout's kvenv, whatever is installed
    return env


@pytest.fixture(scope="module")
def kvenv_python() -> str:
    return sys.executable  # this repository's venv: kvenv's "own" interpreter


def test_kvenv_in_its_own_venv_serves_another_host_venv(tmp_path: Path, kvenv_python: str) -> None:
    host = _host_venv(tmp_path)
    project = _project(tmp_path, host)
    env = _env(tmp_path)
    paths = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    profile = str(project.profile_path)

    def kvenv(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [kvenv_python, "-m", "kvenv", *args],
            cwd=project.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    def about_host(text: str) -> None:
        assert str(host) in text, text
        assert kvenv_python not in text, text

    plan = kvenv("plan", profile, *paths)
    about_host(plan.stdout)
    assert "host python:" in plan.stdout
    assert "overlay shadows" not in plan.stdout  # kvenv's own packages are not the host's

    applied = kvenv("apply", profile, *paths)
    about_host(applied.stdout)
    manifest = json.loads(Path(applied.stdout.split("manifest: ")[1].split()[0]).read_text())
    assert manifest["python"] == str(host)
    assert [p["version"] for p in manifest["host_protected"] if p["name"] == "torch"] == [TORCH]
    again = kvenv("apply", profile, *paths)
    assert "already up to date" in again.stdout

    activation = json.loads(kvenv("activate", profile, *paths, "--shell", "json").stdout)
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    for name, entries in activation["prepend"].items():
        run_env[name] = os.pathsep.join([*entries, *filter(None, [run_env.get(name)])])
    run_env.update(activation["set"])
    script = Path(manifest["dirs"]["bin"]) / "hostprobe"
    assert script.read_text().splitlines()[0] == f"#!{host}"
    ran = subprocess.run(
        ["hostprobe"], env=run_env, capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.split() == [str(host), TORCH]  # the host's python, the host's torch

    about_host(kvenv("verify", profile, *paths).stdout)
    about_host(kvenv("status", profile, *paths).stdout)
    doctor = kvenv("doctor", profile)
    about_host(doctor.stdout)

    # A changed torch in the host venv is drift.
    metadata = next(host.parent.parent.glob("lib/python*/site-packages/torch-*.dist-info/METADATA"))
    metadata.write_text(metadata.read_text().replace(f"Version: {TORCH}", "Version: 2.14.0"))
    drift = kvenv("verify", profile, *paths, code=1)
    assert "torch changed" in drift.stdout + drift.stderr
    assert TORCH in drift.stdout + drift.stderr and "2.14.0" in drift.stdout + drift.stderr

    # Another interpreter named on the command line: a rebuild, not "already up to date".
    other = kvenv("apply", profile, *paths, "--python", kvenv_python)
    assert "already up to date" not in other.stdout
    assert f"host python: {kvenv_python} (from --python)" in other.stdout


def test_a_plain_apply_prints_every_plan_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvenv.cli import main

    wheels = tmp_path / "proj" / "wheels"
    older = f"3.{sys.version_info.minor}.0" if sys.version_info.micro else "3.99.0"
    target = (
        f'[target]\npython = "{older}"\nabi = "cp3{sys.version_info.minor}"\n'
        f'machine = "{platform.machine()}"\n'
    )
    project = write_project(
        tmp_path / "proj",
        native=native_wheel(wheels),
        overlay=[build_wheel(wheels, "helper", "2.0", files={"helper/__init__.py": "V = 2\n"})],
        target=target,
    )
    monkeypatch.setenv("KVENV_PYTHON", sys.executable)  # probed in process
    paths = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    assert main(["plan", str(project.profile_path), *paths]) == 0
    planned = capsys.readouterr().out
    assert "WARNING  Python version" in planned
    assert f"host python: {sys.executable} (from $KVENV_PYTHON)" in planned
    assert main(["apply", str(project.profile_path), *paths]) == 0
    applied = capsys.readouterr()
    assert f"warning: Python version: expected {older}" in applied.err


def test_python_under_run_shell_and_activation_is_the_host_interpreter(
    tmp_path: Path, kvenv_python: str
) -> None:
    """kvenv in its own venv (first on ``PATH``, as when it is activated), the host in another:
    ``python``/``python3`` in ``kvenv run``, ``kvenv shell``, an activated shell and the root's
    ``activate.sh`` are the interpreter the generation was built for (its manifest's), so the
    host's ``torch`` and the overlay import together."""
    host = _host_venv(tmp_path)
    project = _project(tmp_path, host)
    env = _env(tmp_path)
    env["PATH"] = os.pathsep.join([str(Path(kvenv_python).parent), env.get("PATH", os.defpath)])
    env["SHELL"] = "/bin/sh"
    root = tmp_path / "root"
    paths = ["--root", str(root), "--cache", str(tmp_path / "cache")]
    profile = str(project.profile_path)
    kvenv = [kvenv_python, "-m", "kvenv"]

    def sh(command: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            command if stdin is None else ["/bin/sh", "-c", command],
            shell=stdin is None,
            input=stdin,
            cwd=project.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (command, stdin, done.stdout, done.stderr)
        return done.stdout

    sh(" ".join([*kvenv, "apply", profile, *paths]))
    code = "import sys, torch, hostprobe; print(sys.prefix, torch.__version__)"
    expected = f"{host.parent.parent} {TORCH}"  # the host venv's interpreter, the host's torch
    for name in ("python", "python3"):
        ran = subprocess.run(
            [*kvenv, "run", profile, *paths, "--", name, "-c", code],
            cwd=project.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, (name, ran.stderr)
        assert ran.stdout.strip() == expected
    quoted = code.replace('"', '\\"')
    line = f'python -c "{quoted}"\npython3 -c "{quoted}"\n'
    shell = subprocess.run(
        [*kvenv, "shell", profile, *paths],
        input=line,
        cwd=project.dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split("\n")[:2] == [expected, expected], shell.stdout
    activate = " ".join([*kvenv, "activate", profile, *paths, "--shell", "sh"])
    out = sh(f'eval "$({activate})" && python -c "{quoted}" && python3 -c "{quoted}"')
    assert out.split("\n")[:2] == [expected, expected], out
    out = sh(f'. {root / "activate.sh"} && python -c "{quoted}"')
    assert out.strip() == expected, out
    # A host whose directory offers no python3 that is it: activation cannot put it on PATH,
    # `kvenv run -- python3` still runs the recorded interpreter (by its path).
    (host.parent / "python3").unlink()
    for name in ("python", "python3"):
        ran = subprocess.run(
            [*kvenv, "run", profile, *paths, "--", name, "-c", code],
            cwd=project.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, (name, ran.stderr)
        assert ran.stdout.strip() == expected, name


def test_verify_status_and_doctor_judge_the_recorded_host(
    tmp_path: Path, kvenv_python: str
) -> None:
    """``apply --python HOST``, then plain ``verify``/``status``/``doctor`` while the default
    rule names another interpreter (``$KVENV_PYTHON``, without torch): they judge HOST, the
    one the manifest records; ``status``'s ``current`` agrees with ``plan``; ``--python``
    naming another is judged, and said to differ."""
    host = _host_venv(tmp_path)
    wheels = tmp_path / "proj" / "wheels"
    project = write_project(tmp_path / "proj", native=native_wheel(wheels), overlay=[])
    env = {**_env(tmp_path), "KVENV_PYTHON": kvenv_python}
    paths = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    profile = str(project.profile_path)

    def kvenv(*args: str, code: int = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [kvenv_python, "-m", "kvenv", *args],
            cwd=project.dir,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        return done

    kvenv("apply", profile, *paths, "--python", str(host))
    verified = kvenv("verify", profile, *paths)
    assert f"unchanged in {host} (from the current generation's manifest)" in verified.stdout
    status = json.loads(kvenv("status", profile, *paths, "--json").stdout)
    assert status["host_python"]["path"] == str(host)
    plan = kvenv("plan", profile, *paths)
    assert "up to date" not in plan.stdout  # plain plan/apply use $KVENV_PYTHON: a rebuild
    assert status["current"] is False
    text = kvenv("status", profile, *paths).stdout
    assert f"current: no: applied for {host}" in text and f"--python {host}" in text
    with_host = json.loads(kvenv("status", profile, *paths, "--python", str(host), "--json").stdout)
    assert with_host["current"] is True
    assert "up to date" in kvenv("plan", profile, *paths, "--python", str(host)).stdout
    doctor = kvenv("doctor", profile, "--json", KVENV_ROOT=paths[1])
    assert (
        json.loads(doctor.stdout)["host_source"]
        == f"live probe of {host} (from the current generation's manifest)"
    )

    other = kvenv("verify", profile, *paths, "--python", kvenv_python, code=1)
    assert f"--python {kvenv_python} differs from the interpreter" in other.stderr
    assert str(host) in other.stderr

    # A real change to the recorded host's torch is seen by a plain verify.
    metadata = next(host.parent.parent.glob("lib/python*/site-packages/torch-*.dist-info/METADATA"))
    metadata.write_text(metadata.read_text().replace(f"Version: {TORCH}", "Version: 2.14.0"))
    drift = kvenv("verify", profile, *paths, code=1)
    assert "torch changed" in drift.stdout + drift.stderr
    assert "the host changed, not what kvenv installed" in drift.stderr  # not "repair it"
