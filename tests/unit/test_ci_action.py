"""``action.yml``, the GitHub Actions composite action (docs/ci.md): valid YAML with the action
metadata's required keys, inputs used only through the environment, and its own steps run here
as a runner would run them: the install step (offline, from a wheelhouse repacked from this
interpreter, in a network namespace) and the check step against a project whose lock is
current, then tampered."""

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
    assert {"profiles", "python-version"} <= set(inputs)
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


def _run_step(script: str, cwd: Path, env: dict[str, str], *, netns: bool = False) -> Any:
    argv = ["bash", "-c", script]
    if netns:
        argv = ["unshare", "-rn", *argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=540)


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


@pytest.mark.skipif(not _netns_works(), reason="needs `unshare -rn` (a network namespace)")
def test_the_action_installs_kvenv_and_checks_the_profiles(tmp_path: Path) -> None:
    action = _action()
    env = _env(tmp_path)
    project = tmp_path / "project"
    _demo_project(project, env)

    # the install step, as the runner runs it, from this checkout (GITHUB_ACTION_PATH)
    house = tmp_path / "wheelhouse"
    runtime = [r for r in metadata.requires("kvenv-overlay") or () if "extra ==" not in r]
    build = tomlio.read(REPO / "pyproject.toml")["build-system"]["requires"]
    repack_installed([*runtime, *build], house)
    source = tmp_path / "action"
    copy_checkout(source)
    github_path = tmp_path / "github-path"
    runner = dict(
        env,
        RUNNER_TEMP=str(tmp_path / "runner-temp"),
        GITHUB_ACTION_PATH=str(source),
        GITHUB_PATH=str(github_path),
        KVENV_SPEC="",
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(house),
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    (tmp_path / "runner-temp").mkdir()
    install = _run_step(_step(action, "Install kvenv")["run"], project, runner, netns=True)
    assert install.returncode == 0, install.stdout + install.stderr
    (added,) = github_path.read_text().splitlines()
    assert Path(added, "kvenv").is_file()

    # the check step with the kvenv it installed first on PATH (as GITHUB_PATH does)
    check = _step(action, "kvenv validate and kvenv lock --check")["run"]
    checking = dict(env, PATH=f"{added}{os.pathsep}/usr/bin:/bin")
    named = _run_step(check, project, dict(checking, KVENV_PROFILES=" demo\n"))
    assert named.returncode == 0, named.stdout + named.stderr
    assert "is valid, complete and current (2 packages)" in named.stdout
    every = _run_step(check, project, dict(checking, KVENV_PROFILES=""))  # profiles/*.toml
    assert every.returncode == 0 and "::group::kvenv validate profiles/demo.toml" in every.stdout

    lock = project / "locks" / "pylock.demo.toml"
    text = lock.read_text()
    digest = re.search(r'sha256 = "([0-9a-f]{64})"', text)
    assert digest is not None
    bad = ("0" if digest.group(1)[0] != "0" else "1") + digest.group(1)[1:]
    lock.write_text(text.replace(digest.group(1), bad, 1))
    tampered = _run_step(check, project, dict(checking, KVENV_PROFILES="demo"))
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    assert "lock check failed" in tampered.stderr
    assert "::error title=kvenv::demo: exit 1" in tampered.stdout
    missing = _run_step(check, project, dict(checking, KVENV_PROFILES="nosuch"))
    assert missing.returncode == 2, missing.stdout + missing.stderr
