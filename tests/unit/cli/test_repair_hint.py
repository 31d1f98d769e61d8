"""The fix ``kvenv verify`` prints for a damaged generation, run literally, repairs it: the
hint names the profile and the paths it was given, and ``verify`` then passes."""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

import pytest

from kvenv.cli import main
from tests.support.applyenv import local_project


def test_the_printed_repair_command_repairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = local_project(tmp_path / "proj")
    paths = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    profile = str(project.profile_path)
    assert main(["apply", profile, *paths]) == 0
    store = tmp_path / "cache" / "store"
    victim = next(store.glob("*/site/helper/__init__.py"))
    os.chmod(victim.parent, stat.S_IMODE(victim.parent.stat().st_mode) | stat.S_IWUSR)
    os.chmod(victim, 0o644)
    victim.write_text("V = 'tampered'\n")
    capsys.readouterr()
    assert main(["verify", profile, *paths]) == 1
    err = capsys.readouterr().err
    hint = re.search(r"repair it: `([^`]+)`", err)
    assert hint is not None, err
    argv = shlex.split(hint.group(1))
    assert argv[0] == "kvenv" and "--repair" in argv and str(tmp_path / "root") in argv
    assert main(argv[1:]) == 0
    assert main(["verify", profile, *paths]) == 0
