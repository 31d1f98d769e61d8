"""The ``demo`` project the notebook and single-file tests run: the built-in demo profile's
shape (a pure-Python native wheel, markdown-it-py 3.0.0, and its one-package overlay, mdurl
0.1.2), built here because the built-in one downloads its bytes from the package index; and a
clean environment for the ``kvenv`` commands the tests run (no ``KVENV_``/``PIP_``/``UV_``
variables, a home of its own, this environment's ``kvenv`` first on ``PATH``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.wheels import build_wheel

KVENV = str(Path(sys.executable).parent / "kvenv")


def netns_works() -> bool:
    """Whether this machine lets a test run a command in a user and network namespace with
    its own mounts (``unshare -rnm``)."""
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-rnm", "true"], capture_output=True)
    return done.returncode == 0


def clean_env(base: Path) -> dict[str, str]:
    """This process's environment for a test's commands, with ``base/home`` as the home."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "PIP_", "UV_")) and k not in ("VIRTUAL_ENV",)
    }
    env["HOME"] = str(base / "home")
    env["XDG_CACHE_HOME"] = str(base / "home" / ".cache")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def demo_project(base: Path) -> Path:
    """``base/project``: profiles/demo.toml (markdown-it-py from a path, overlay mdurl) and
    its kvenv lock, made with ``kvenv lock --no-index --find-links`` the project's wheels."""
    project = base / "project"
    wheels = project / "wheels"
    native = build_wheel(
        wheels,
        "markdown-it-py",
        "3.0.0",
        requires=["mdurl~=0.1"],
        files={"markdown_it/__init__.py": "__version__ = '3.0.0'\n"},
    )
    build_wheel(wheels, "mdurl", "0.1.2", files={"mdurl/__init__.py": "__version__ = '0.1.2'\n"})
    digest = hashlib.sha256(native.read_bytes()).hexdigest()
    (project / "profiles").mkdir(parents=True)
    (project / "profiles" / "demo.toml").write_text(
        "schema = 1\n"
        'name = "demo"\n'
        'description = "the notebook test\'s demo: markdown-it-py + mdurl, built locally"\n'
        "[target]\n"
        'python = "3.10"\nimplementation = "cpython"\nabi = "none"\n'
        "[native]\n"
        'name = "markdown-it-py"\nversion = "3.0.0"\n'
        f'sha256 = "{digest}"\nsize = {native.stat().st_size}\n'
        "[native.source]\n"
        f'kind = "path"\npath = "wheels/{native.name}"\n'
        "[overlay]\n"
        'lock = "locks/pylock.demo.toml"\n'
    )
    done = subprocess.run(
        [KVENV, "lock", "demo", "--no-index", "--find-links", str(wheels)],
        cwd=project,
        capture_output=True,
        text=True,
        env=clean_env(base),
    )
    assert done.returncode == 0, done.stderr
    return project
