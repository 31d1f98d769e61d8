"""The pure commands (``plan``, ``status``, ``validate``, ``show``, ``lock --check``, ``list``,
``generations``) create no directory and write no file anywhere but the user's own cache
directory (where kvenv keeps its records and probe memos), never in a profile's ``[paths]``
root or cache. Checked by comparing trees before and after, as root where this runs as root
(file permissions would not stop a write)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from tests.support.applyenv import local_project
from tests.support.hardening import tree_state

REPO_ROOT = Path(__file__).resolve().parents[3]
PURE = (
    ("plan",),
    ("status",),
    ("status", "--json"),
    ("validate",),
    ("show",),
    ("lock", "--check"),
    ("list",),
    ("generations",),
)


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "VIRTUAL_ENV", "CONDA_", "PYTHON", "XDG_"))
    }
    env["HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["LANG"] = env.get("LANG", "C.UTF-8")
    return env


def test_pure_commands_write_only_into_the_user_cache(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    host = tmp_path / "host-venv"  # another interpreter: its probe is memoized
    venv.EnvBuilder(with_pip=False, symlinks=True).create(host)
    paths_root, paths_cache = tmp_path / "paths-root", tmp_path / "paths-cache"
    with project.profile_path.open("a") as stream:
        stream.write(
            f'[paths]\nroot = "{paths_root}"\ncache = "{paths_cache}"\n'
            f'[host]\npython = "{host / "bin" / "python"}"\n'
        )
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home)
    profile = str(project.profile_path)

    def kvenv(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "kvenv", *args],
            cwd=project.dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert "Traceback" not in done.stderr, (args, done.stderr)
        return done

    env["KVENV_PYTHON"] = str(host / "bin" / "python")  # the default profile's host too
    user_cache = home / ".cache" / "kvenv"
    kaggle = Path("/kaggle").exists()

    def pure_commands() -> None:
        before = tree_state(tmp_path)
        for command in PURE:
            for ref in (profile, None):  # named, and the default profile (Kaggle's paths)
                args = [command[0], *([ref] if ref else []), *command[1:]]
                kvenv(*args)
                after = tree_state(tmp_path)
                changed = {
                    rel
                    for rel in set(before) | set(after)
                    if before.get(rel) != after.get(rel)
                    and not (tmp_path / rel).is_relative_to(user_cache)
                    and not user_cache.is_relative_to(tmp_path / rel)  # made on the way there
                }
                assert not changed, (args, sorted(changed)[:10])
                assert Path("/kaggle").exists() is kaggle, args  # nothing made for a default

    pure_commands()  # nothing applied yet: no root, no cache
    assert not paths_root.exists() and not paths_cache.exists()
    applied = kvenv("apply", profile)
    assert applied.returncode == 0, applied.stderr
    pure_commands()
