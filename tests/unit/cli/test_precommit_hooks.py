"""kvenv's pre-commit hooks (``.pre-commit-hooks.yaml``, kvenv/cli/precommit.py) run by the real
``pre-commit`` in a temporary git repository that uses this checkout as its hook repository.

pre-commit installs a hook repository with pip into an environment of its own. Offline: the
hook repository is this checkout's files (tracked and untracked, as ``git ls-files`` lists them)
committed into a temporary repository, kvenv's dependencies and build backend are repacked from
this interpreter into a wheelhouse (tests/support/wheelhouse.py), and ``pre-commit`` runs inside
a network namespace (``unshare -rn``) with ``PIP_NO_INDEX``, ``PIP_FIND_LINKS`` at that
wheelhouse and no pip configuration file. The hooks pass on a profile changed and relocked,
skip a commit that touches no profile, lock or snapshot, and fail with kvenv's message on a
tampered lock.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from kvenv._util import tomlio
from kvenv.cli.precommit import affected_profiles, run_hook
from tests.support.paths import REPO
from tests.support.wheelhouse import copy_checkout, repack_installed
from tests.support.wheels import build_wheel

PRE_COMMIT = Path(sys.executable).parent / "pre-commit"
KVENV = str(Path(sys.executable).parent / "kvenv")


def _netns_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("git") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _env(base: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "PIP_", "UV_", "VIRTUALENV_", "PRE_COMMIT", "PYTHON"))
        and k != "VIRTUAL_ENV"
    }
    env.update(
        HOME=str(base / "home"),
        XDG_CACHE_HOME=str(base / "home" / ".cache"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def _demo(project: Path) -> None:
    """profiles/demo.toml (native markdown-it-py from a path, overlay mdurl) and its lock."""
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


def _lock(project: Path, env: dict[str, str]) -> None:
    argv = [KVENV, "lock", "demo", "--no-index", "--find-links", str(project / "wheels")]
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _hook_repository(base: Path) -> tuple[Path, str]:
    """This checkout's files, as ``git ls-files`` lists them, committed into a new repository."""
    hooks = copy_checkout(base / "hook-repo")
    _git(hooks, "init", "-q")
    _git(hooks, "add", "-A")
    _git(hooks, "commit", "-q", "-m", "kvenv as a hook repository")
    return hooks, _git(hooks, "rev-parse", "HEAD")


def _wheelhouse(base: Path) -> Path:
    """kvenv's dependencies and build backend as wheels, repacked from this interpreter."""
    build = tomlio.read(REPO / "pyproject.toml")["build-system"]["requires"]
    runtime = [r for r in metadata.requires("kvenv-overlay") or () if "extra ==" not in r]
    house = base / "wheelhouse"
    repack_installed([*runtime, *build], house)
    return house


def _pre_commit(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``pre-commit run`` on the staged files, with no network and pip on the wheelhouse."""
    return subprocess.run(
        ["unshare", "-rn", str(PRE_COMMIT), "run", "--color", "never"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )


@pytest.mark.skipif(
    not (_netns_works() and PRE_COMMIT.is_file()),
    reason="needs pre-commit (test extra), git and `unshare -rn` (a network namespace)",
)
def test_the_hooks_pass_a_relocked_profile_and_refuse_a_tampered_lock(tmp_path: Path) -> None:
    hooks, rev = _hook_repository(tmp_path)
    env = _env(tmp_path)
    project = tmp_path / "project"
    _demo(project)
    _lock(project, env)
    (project / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {hooks}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: kvenv-validate\n"
        "      - id: kvenv-lock-check\n"
    )
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "demo")
    env.update(
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(_wheelhouse(tmp_path)),
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        VIRTUALENV_NO_PERIODIC_UPDATE="1",
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
    )

    # a change to the profile, relocked: both hooks run and pass
    profile = project / "profiles" / "demo.toml"
    profile.write_text(profile.read_text().replace('name = "demo"\n', 'name = "demo"\n# ours\n', 1))
    text = profile.read_text().replace(
        'name = "demo"\n', 'name = "demo"\ndescription = "the team box"\n', 1
    )
    profile.write_text(text)
    _lock(project, env)
    _git(project, "add", "-A")
    passed = _pre_commit(project, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "kvenv validate" in passed.stdout and "kvenv lock --check" in passed.stdout
    assert passed.stdout.count("Passed") == 2, passed.stdout
    _git(project, "commit", "-q", "-m", "describe demo")

    # a commit that touches no profile, lock or snapshot: neither hook runs
    (project / "notes.txt").write_text("unrelated\n")
    _git(project, "add", "notes.txt")
    skipped = _pre_commit(project, env)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert skipped.stdout.count("(no files to check)Skipped") == 2, skipped.stdout
    _git(project, "commit", "-q", "-m", "notes")

    # a tampered lock: the native wheel's hash edited by hand
    lock = project / "locks" / "pylock.demo.toml"
    native = project / "wheels" / "markdown_it_py-3.0.0-py3-none-any.whl"
    digest = hashlib.sha256(native.read_bytes()).hexdigest()
    bad = ("0" if digest[0] != "0" else "1") + digest[1:]
    lock.write_text(lock.read_text().replace(f'sha256 = "{digest}"', f'sha256 = "{bad}"', 1))
    _git(project, "add", "-A")
    failed = _pre_commit(project, env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "kvenv lock --check" in failed.stdout and "Failed" in failed.stdout
    assert "lock check failed" in failed.stdout
    assert "the native wheel's sha256 is " in failed.stdout and "the profile pins" in failed.stdout
    assert "relock with `kvenv lock" in failed.stdout


def test_changed_files_map_to_the_profiles_they_belong_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    _demo(tmp_path)
    (tmp_path / "profiles" / "other.toml").write_text(
        'schema = 1\nname = "other"\n[host]\nsnapshot = "profiles/other.host.json"\n'
    )
    demo, other = tmp_path / "profiles" / "demo.toml", tmp_path / "profiles" / "other.toml"
    assert affected_profiles(["locks/pylock.demo.toml"], tmp_path) == [demo]
    assert affected_profiles(["profiles/demo.toml"], tmp_path) == [demo]
    assert affected_profiles(["profiles/other.host.json"], tmp_path) == [other]
    assert affected_profiles(["README.md"], tmp_path) == []
    (tmp_path / "profiles" / "broken.toml").write_text("schema = [\n")
    broken = tmp_path / "profiles" / "broken.toml"
    assert affected_profiles(["profiles/broken.toml"], tmp_path) == [broken]
    assert run_hook(["validate", "profiles/broken.toml"], cwd=tmp_path) == 2
    assert run_hook(["lock-check", "README.md"], cwd=tmp_path) == 0
    assert run_hook(["nonsense"], cwd=tmp_path) == 2
