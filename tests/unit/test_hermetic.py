"""The home guard (:mod:`tests.support.hermetic`): the session runs in a temporary home with
kvenv's variables cleared, and a session that writes into the real home fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.hermetic import XDG, kvenv_variables, real_home

REPO = Path(__file__).resolve().parents[2]

INNER_TEST = """
import os, subprocess, sys
from pathlib import Path

from kvenv.model.places import default_cache_dir, user_data_dir
from tests.support.hermetic import kvenv_variables, real_home


def test_writes_go_to_the_session_home():
    assert not kvenv_variables(os.environ), sorted(os.environ)
    assert Path.home() != real_home()
    cache = default_cache_dir()
    cache.mkdir(parents=True)
    (cache / "record").write_text("x")
    user_data_dir(os.environ).mkdir(parents=True)
    # a child that keeps only PATH and HOME (as tests/unit/cli/test_run.py does) and writes
    # where Ray keeps its token
    code = ("import pathlib; p = pathlib.Path('~/.ray').expanduser(); p.mkdir(); "
            "(p / 't').write_text('x')")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    # the user's pip configuration, copied: pip picks the same wheels as outside the tests
    assert (Path.home() / ".config/pip/pip.conf").read_text() == "[global]\\nfind-links = /w\\n"
    os.environ["KVENV_ROOT"] = "/nowhere"  # not through monkeypatch: the next test must not see it


def test_next_test_sees_no_kvenv_variable():
    assert "KVENV_ROOT" not in os.environ


def test_a_leak():
    if os.environ.get("INNER_LEAK"):
        (real_home() / ".cache" / "kvenv" / "memo-v1").mkdir(parents=True)
"""


def _inner_session(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    project = tmp_path / "inner"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (project / "conftest.py").write_text(
        'pytest_plugins = ["tests.support.hermetic"]\n', encoding="utf-8"
    )
    (project / "test_inner.py").write_text(INNER_TEST, encoding="utf-8")
    home = tmp_path / "real-home"
    (home / ".cache").mkdir(parents=True)
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\nfind-links = /w\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "KVENV_ROOT": str(tmp_path / "user-root"),
        "KVENV_CACHE_DIR": str(home / ".cache" / "kvenv"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        **extra,
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done, home


def _listing(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*"))


def test_this_session_runs_in_a_temporary_home() -> None:
    home = Path(os.environ["HOME"])
    assert home != real_home()
    assert not home.is_relative_to(real_home())
    for name, rel in XDG.items():
        assert Path(os.environ[name]) == home / rel, name
    assert Path(os.environ["RAY_TMPDIR"]).is_dir()
    assert kvenv_variables(os.environ) == []


def test_a_session_leaves_the_real_home_as_it_was(tmp_path: Path) -> None:
    done, home = _inner_session(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
    # the user's KVENV_CACHE_DIR and XDG_CACHE_HOME unused
    assert _listing(home) == [".cache", ".config", ".config/pip", ".config/pip/pip.conf"]
    assert not (tmp_path / "user-root").exists()


def test_a_session_that_writes_into_the_real_home_fails(tmp_path: Path) -> None:
    done, home = _inner_session(tmp_path, INNER_LEAK="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
    assert "HOME GUARD" in done.stdout, done.stdout
    assert f"{home / '.cache' / 'kvenv'}: written by the tests" in done.stdout, done.stdout


def test_the_check_can_be_skipped_but_the_home_stays_temporary(tmp_path: Path) -> None:
    done, home = _inner_session(tmp_path, INNER_LEAK="1", KVENV_TEST_HOME_GUARD="0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HOME GUARD" not in done.stdout
    leak = [".cache/kvenv", ".cache/kvenv/memo-v1"]  # the leak only
    assert _listing(home) == sorted(
        [".cache", ".config", ".config/pip", ".config/pip/pip.conf", *leak]
    )
