"""A directory to run the CLI in, in process, isolated from the user's kvenv settings: no
profile or interpreter from the environment, the runtime root and cache under it, and a
``profiles/broken.toml`` that parses but fails validation."""

from __future__ import annotations

from pathlib import Path

import pytest

BROKEN_PROFILE = 'schema = 1\nname = "broken"\n[runtime]\ngpu_memory_utilization = 7\n'


def isolated_cli_dir(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``directory`` the working directory of an isolated CLI run (see the module
    docstring); returns it."""
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KVENV_ROOT", str(directory / "root"))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(directory / "cache"))
    monkeypatch.chdir(directory)
    (directory / "profiles").mkdir()
    (directory / "profiles" / "broken.toml").write_text(BROKEN_PROFILE)
    return directory
