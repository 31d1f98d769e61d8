"""``action.yml``, the GitHub Actions composite action (docs/ci.md): valid YAML with the action
metadata's required keys, every action it uses pinned by commit, inputs used only through the
environment, and its own steps run here exactly as a runner runs them: each step's ``run:``
script written to a file with its ``env:`` rendered from the inputs, run by ``bash --noprofile
--norc -eo pipefail FILE`` (GitHub's ``shell: bash``) with ``RUNNER_TEMP``, ``GITHUB_PATH`` and
``GITHUB_OUTPUT``: the install step (offline, from a wheelhouse repacked from this interpreter,
in a network namespace) and the check step against a failing profile first and a passing one."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from kvenv._util import tomlio
from tests.support.paths import REPO
from tests.support.wheelhouse import copy_checkout, repack_installed
from tests.support.wheels import build_wheel

yaml = pytest.importorskip("yaml")

ACTION = REPO / "action.yml"


def _action() -> dict[str, Any]:
    data = yaml.safe_load(ACTION.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _step(action: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in action["runs"]["steps"] if s.get("name") == name]
    return step


def test_the_action_has_the_metadata_a_composite_action_requires() -> None:
    action = _action()
    assert isinstance(action["name"], str) and action["name"]
    assert isinstance(action["description"], str) and action["description"]
    runs = action["runs"]
    assert runs["using"] == "composite"
    assert runs["steps"]
    for step in runs["steps"]:
        assert ("run" in step) != ("uses" in step), step  # one of the two, never both
        if "run" in step:
            assert step["shell"] == "bash", step
    inputs = action["inputs"]
    assert {"profiles", "python-version", "cache"} <= set(inputs)
    for name, spec in inputs.items():
        assert re.fullmatch(r"[a-z][a-z0-9-]*", name)
        assert isinstance(spec["description"], str) and spec["description"], name
        assert spec.get("required") is False and "default" in spec, name


def test_inputs_reach_scripts_only_through_the_environment() -> None:
    text = ACTION.read_text(encoding="utf-8")
    action = _action()
    used = set(re.findall(r"\$\{\{\s*inputs\.([A-Za-z0-9_-]+)\s*\}\}", text))
    conditions = " ".join(str(s.get("if", "")) for s in action["runs"]["steps"])
    used |= set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", conditions))
    assert used <= set(action["inputs"]), used - set(action["inputs"])
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]  # no expression in a script


def test_every_action_used_is_pinned_by_commit_with_its_tag_named() -> None:
    uses = re.findall(r"^\s*uses:\s*(\S+)(.*)$", ACTION.read_text(encoding="utf-8"), re.M)
    assert any(ref.startswith("actions/setup-python@") for ref, _ in uses), uses
    for ref, rest in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s*# v\d+(\.\d+)*", rest), (ref, rest)  # the tag it is


def test_the_failed_profiles_output_comes_from_the_check_step() -> None:
    action = _action()
    output = action["outputs"]["failed-profiles"]
    assert output["description"]
    assert output["value"] == "${{ steps.check.outputs.failed-profiles }}"
    assert _step(action, "kvenv validate and kvenv lock --check")["id"] == "check"
    setup = _step(action, "Set up Python")
    assert setup["with"]["update-environment"] is False  # the job's python stays the job's


def _render(value: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    """A step's ``${{ ... }}`` expressions, as the runner renders the ones action.yml uses."""

    def one(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if expression.startswith("inputs."):
            return inputs[expression.removeprefix("inputs.")]
        if expression.startswith("steps."):
            _, step, _, name = expression.split(".", 3)
            return outputs.get(step, {}).get(name, "")
        raise AssertionError(f"an expression the test does not render: {expression}")

    return re.sub(r"\$\{\{(.*?)\}\}", one, value)


class Runner:
    """One job's runner: its temp dir, ``GITHUB_PATH`` and the steps' outputs."""

    def __init__(self, base: Path, env: dict[str, str], inputs: dict[str, str]) -> None:
        action = _action()
        self.inputs = {k: str(v["default"]) for k, v in action["inputs"].items()} | inputs
        self.base = base
        self.temp = base / "runner-temp"
        self.temp.mkdir(parents=True)
        self.path_file = base / "github-path"
        self.path_file.touch()
        self.env = dict(env, RUNNER_TEMP=str(self.temp), GITHUB_PATH=str(self.path_file))
        self.outputs: dict[str, dict[str, str]] = {}
        self.count = 0

    def added_paths(self) -> list[str]:
        return self.path_file.read_text(encoding="utf-8").splitlines()

    def run(
        self, name: str, workspace: Path, *, netns: bool = False, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        step = _step(_action(), name)
        self.count += 1
        script = self.base / f"step-{self.count}.sh"
        script.write_text(step["run"], encoding="utf-8")
        output = self.base / f"output-{self.count}"
        output.touch()
        env = dict(self.env, GITHUB_OUTPUT=str(output), GITHUB_WORKSPACE=str(workspace), **extra)
        env.update({k: _render(str(v), self.inputs, self.outputs) for k, v in step["env"].items()})
        cwd = workspace / _render(step.get("working-directory", "."), self.inputs, self.outputs)
        argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
        if netns:
            argv = ["unshare", "-rn", *argv]
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
        values = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        if "id" in step:
            self.outputs[step["id"]] = values
        return done


def _netns_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def _env(base: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "PIP_", "UV_", "PYTHON", "GITHUB_", "RUNNER_"))
        and k != "VIRTUAL_ENV"
    }
    env.update(
        HOME=str(base / "home"),
        XDG_CACHE_HOME=str(base / "home" / ".cache"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def _demo_project(project: Path, env: dict[str, str]) -> None:
    wheels = project / "wheels"
    native = build_wheel(wheels, "markdown-it-py", "3.0.0", requires=["mdurl~=0.1"])
    build_wheel(wheels, "mdurl", "0.1.2")
    (project / "profiles").mkdir(parents=True)
    (project / "profiles" / "demo.toml").write_text(
        'schema = 1\nname = "demo"\n'
        '[target]\npython = "3.10"\nimplementation = "cpython"\nabi = "none"\n'
        '[native]\nname = "markdown-it-py"\nversion = "3.0.0"\n'
        f'sha256 = "{hashlib.sha256(native.read_bytes()).hexdigest()}"\n'
        f"size = {native.stat().st_size}\n"
        f'[native.source]\nkind = "path"\npath = "wheels/{native.name}"\n'
        '[overlay]\nlock = "locks/pylock.demo.toml"\n'
    )
    kvenv = str(Path(sys.executable).parent / "kvenv")
    argv = [kvenv, "lock", "demo", "--no-index", "--find-links", str(wheels)]
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _failing_twin(project: Path) -> None:
    """``profiles/bad.toml``: the demo profile under another name with its lock, whose native
    wheel's sha256 was edited by hand (``kvenv lock --check`` exits 1)."""
    text = (project / "profiles" / "demo.toml").read_text()
    (project / "profiles" / "bad.toml").write_text(
        text.replace('name = "demo"', 'name = "bad"').replace("pylock.demo", "pylock.bad")
    )
    lock = (project / "locks" / "pylock.demo.toml").read_text()
    digest = re.search(r'sha256 = "([0-9a-f]{64})"', lock)
    assert digest is not None
    bad = ("0" if digest.group(1)[0] != "0" else "1") + digest.group(1)[1:]
    (project / "locks" / "pylock.bad.toml").write_text(lock.replace(digest.group(1), bad, 1))


def _kvenv_alone(base: Path) -> Path:
    """A directory holding only a link to this environment's kvenv (what the install step
    puts on PATH)."""
    bin_dir = base / "kvenv-bin"
    bin_dir.mkdir()
    (bin_dir / "kvenv").symlink_to(Path(sys.executable).parent / "kvenv")
    return bin_dir


CHECK = "kvenv validate and kvenv lock --check"


def test_the_check_step_checks_every_profile_under_githubs_bash_options(tmp_path: Path) -> None:
    env = _env(tmp_path)
    project = tmp_path / "project"
    _demo_project(project, env)
    _failing_twin(project)
    env["PATH"] = f"{_kvenv_alone(tmp_path)}{os.pathsep}/usr/bin:/bin"
    runner = Runner(tmp_path / "job", env, {"profiles": "bad\n demo"})  # the failing one first
    done = runner.run(CHECK, project)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # both profiles checked, the passing one after the failure
    assert "::group::kvenv validate bad && kvenv lock bad --check" in out
    assert "::group::kvenv validate demo && kvenv lock demo --check" in out
    assert "is valid, complete and current (2 packages)" in out
    (error,) = [line for line in out.splitlines() if line.startswith("::error")]
    prefix = "::error file=profiles/bad.toml,title=kvenv lock --check failed (exit 1%3A "
    assert error.startswith(prefix), error
    message = error.split("::", 2)[2]
    assert message.startswith("bad: kvenv: error: lock check failed"), message
    assert "%0A" in message and "\n" not in message  # kvenv's lines, escaped into one
    assert "$.packages[0].wheels[0].hashes.sha256: the lock was edited by hand" in message
    assert "the native wheel's sha256 is " in message and "; the profile pins " in message
    assert runner.outputs["check"]["failed-profiles"] == "bad"
    assert "2 profile(s) checked, 1 failed: bad" in out

    # every profiles/*.toml when none is named; a missing profile is bad input (exit 2)
    every = Runner(tmp_path / "job-every", env, {}).run(CHECK, project)
    assert every.returncode == 1
    assert "profiles/bad.toml" in every.stdout and "profiles/demo.toml" in every.stdout
    missing_runner = Runner(tmp_path / "job-missing", env, {"profiles": "nosuch demo"})
    missing = missing_runner.run(CHECK, project)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "::error title=kvenv validate failed (exit 2%3A" in missing.stdout
    assert missing_runner.outputs["check"]["failed-profiles"] == "nosuch"
    (project / "locks" / "pylock.bad.toml").unlink()
    (project / "profiles" / "bad.toml").unlink()
    passing_runner = Runner(tmp_path / "job-pass", env, {"profiles": "demo"})
    passing = passing_runner.run(CHECK, project)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert passing_runner.outputs["check"]["failed-profiles"] == ""
    assert "::error" not in passing.stdout


@pytest.mark.skipif(not _netns_works(), reason="needs `unshare -rn` (a network namespace)")
def test_the_install_step_puts_only_kvenv_on_path(tmp_path: Path) -> None:
    env = _env(tmp_path)
    project = tmp_path / "project"
    _demo_project(project, env)
    house = tmp_path / "wheelhouse"
    runtime = [r for r in metadata.requires("kvenv-overlay") or () if "extra ==" not in r]
    build = tomlio.read(REPO / "pyproject.toml")["build-system"]["requires"]
    repack_installed([*runtime, *build], house)
    source = tmp_path / "action"
    copy_checkout(source)
    # the runner's python3: this interpreter's base (a venv of a venv would do as well)
    base_bin = tmp_path / "base-bin"
    base_bin.mkdir()
    (base_bin / "python3").symlink_to(Path(sys.executable).resolve())
    env["PATH"] = f"{base_bin}{os.pathsep}/usr/bin:/bin"
    runner = Runner(tmp_path / "job", env, {"python-version": "", "cache": "true"})
    install = runner.run(
        "Install kvenv",
        project,
        netns=True,
        GITHUB_ACTION_PATH=str(source),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(house),
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (added,) = runner.added_paths()
    assert sorted(p.name for p in Path(added).iterdir()) == ["kvenv"]
    assert shutil.which("python", path=added) is None and shutil.which("pip", path=added) is None
    assert (runner.temp / "kvenv-pip-cache").is_dir()  # the cache input: pip's cache there

    # the check step with that kvenv first on PATH (as GITHUB_PATH does)
    runner.env["PATH"] = f"{added}{os.pathsep}/usr/bin:/bin"
    runner.inputs["profiles"] = "demo"
    check = runner.run(CHECK, project)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "is valid, complete and current (2 packages)" in check.stdout


def test_a_failing_install_is_annotated_and_ends_the_step(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["PATH"] = "/usr/bin:/bin"
    runner = Runner(tmp_path / "job", env, {"python-version": ""})
    runner.outputs["python"] = {"python-path": str(tmp_path / "no-such-python")}
    done = runner.run("Install kvenv", tmp_path, GITHUB_ACTION_PATH=str(tmp_path))
    assert done.returncode == 127, done.stdout + done.stderr
    assert "::error title=kvenv action::installing kvenv: " in done.stdout
    assert "no-such-python -m venv" in done.stdout and "failed with exit 127" in done.stdout
    assert runner.added_paths() == []
