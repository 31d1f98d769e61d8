"""kvenv's version comes from git (issue 36): hatch-vcs with ``release-branch-semver`` gives
``0.2.0.devN+g<commit>`` after the tag ``v0.1.0``, the tag's own version on a release tag, and
the fallback ``0.2.0.dev0+unknown`` in a tree without git, which still builds. Each case runs
the build backend's own version source (``hatchling version``) on a copy of this checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv import __version__
from kvenv.cli import main
from tests.support.wheelhouse import copy_checkout

FALLBACK = "0.2.0.dev0+unknown"


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _version(cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "version"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_kvenv_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"kvenv {__version__}\n"


def test_a_tree_without_git_builds_with_the_fallback(tmp_path: Path) -> None:
    source = copy_checkout(tmp_path / "src")
    assert _version(source) == FALLBACK
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", "dist", "."],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (source / "dist").glob("*.whl")
    assert wheel.name == f"kvenv_overlay-{FALLBACK}-py3-none-any.whl"
    written = (source / "kvenv" / "_version.py").read_text()
    assert f'__version__ = "{FALLBACK}"' in written


def test_commits_after_a_tag_and_on_a_tag(tmp_path: Path) -> None:
    source = copy_checkout(tmp_path / "src")
    _git(source, "init", "-q", "-b", "main")
    _git(source, "add", "-A")
    _git(source, "commit", "-q", "-m", "first")
    _git(source, "tag", "-a", "v0.1.0", "-m", "0.1.0")
    (source / "NOTES").write_text("a change\n")
    _git(source, "add", "NOTES")
    _git(source, "commit", "-q", "-m", "second")
    commit = _git(source, "rev-parse", "--short=9", "HEAD")
    assert _version(source) == f"0.2.0.dev1+g{commit}"
    (source / "NOTES").write_text("uncommitted\n")
    assert re.fullmatch(rf"0\.2\.0\.dev1\+g{commit}\.d\d{{8}}", _version(source))
    _git(source, "commit", "-q", "-am", "third")
    _git(source, "tag", "-a", "v0.2.0", "-m", "0.2.0")
    assert _version(source) == "0.2.0"
