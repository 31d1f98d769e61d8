"""A ``demo``-shaped project built here (the built-in demo downloads its bytes from the package
index): a pure-Python native wheel markdown-it-py 3.0.0 with its ``markdown-it`` console script,
its one-package overlay mdurl 0.1.2, a profile of any name that takes the native from a path,
and the lock ``kvenv lock`` writes for it from the project's own wheelhouse. Used by the place
tests (tests/unit/cli/test_one_place.py): a checkout laid out as an editable install, and the
offline recipe of docs/kaggle.md."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO
from tests.support.wheels import build_wheel

CLI = "import sys\ndef main():\n    print('<p>' + open(sys.argv[1]).read().strip() + '</p>')\n"


def clean_env(home: Path, pythonpath: Path = REPO) -> dict[str, str]:
    """This process's environment without kvenv's, pip's, uv's or a venv's settings, ``HOME``
    at ``home`` (so the default root and cache are under it) and ``pythonpath`` first on the
    import path (this checkout's kvenv, or a copy's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "PIP_", "UV_", "XDG_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["HOME"] = str(home)
    env["PYTHONPATH"] = str(pythonpath)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    env.setdefault("LANG", "C.UTF-8")
    return env


def demo_project(project: Path, name: str = "demo", *, env: dict[str, str]) -> Path:
    """``project/profiles/<name>.toml``, its wheels under ``project/wheels`` and its lock under
    ``project/locks`` (``kvenv lock`` run in ``env``); returns ``project``."""
    wheels = project / "wheels"
    native = build_wheel(
        wheels,
        "markdown-it-py",
        "3.0.0",
        requires=["mdurl~=0.1"],
        files={"markdown_it/__init__.py": "__version__ = '3.0.0'\n", "markdown_it/cli.py": CLI},
        entry_points={"markdown-it": "markdown_it.cli:main"},
    )
    build_wheel(wheels, "mdurl", "0.1.2", files={"mdurl/__init__.py": "__version__ = '0.1.2'\n"})
    digest = hashlib.sha256(native.read_bytes()).hexdigest()
    (project / "profiles").mkdir(parents=True, exist_ok=True)
    (project / "profiles" / f"{name}.toml").write_text(
        "schema = 1\n"
        f'name = "{name}"\n'
        'description = "a demo built locally: markdown-it-py + mdurl"\n'
        "[target]\n"
        'python = "3.10"\nimplementation = "cpython"\nabi = "none"\n'
        "[native]\n"
        'name = "markdown-it-py"\nversion = "3.0.0"\n'
        f'sha256 = "{digest}"\nsize = {native.stat().st_size}\n'
        "[native.source]\n"
        f'kind = "path"\npath = "wheels/{native.name}"\n'
        "[overlay]\n"
        f'lock = "locks/pylock.{name}.toml"\n'
        "[runtime.env]\n"
        'KVENV_DEMO = "1"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "kvenv", "lock", name, "--no-index", "--find-links", str(wheels)],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return project
