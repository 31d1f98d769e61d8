"""``status`` of a profile whose lock is missing (declared in ``[overlay] lock``, not made yet)
agrees with ``activate`` and ``run``, which work: it reports the state (exit 0), says the
generation is not current because the profile is not locked, and names the command that locks
it; it is not a bad-input error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.applyenv import standard_project
from tests.support.hardening import run_cli


def test_status_of_a_profile_without_its_lock_reports_not_locked(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    paths = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    profile = str(project.profile_path)
    applied = run_cli(["apply", profile, *paths])
    assert applied.code == 0, applied.text
    missing = project.dir / "locks" / "not-yet.toml"
    with project.profile_path.open("a") as stream:
        stream.write('[overlay]\nlock = "locks/not-yet.toml"\n')

    status = run_cli(["status", profile, *paths])
    assert status.code == 0, status.text
    assert f"current: no: lock file not found: {missing}; make it with `kvenv lock " in status.out
    data = json.loads(run_cli(["status", profile, *paths, "--json"]).out)
    assert data["applied"] is True and data["current"] is False
    assert "lock file not found" in data["lock_problem"]
    assert run_cli(["activate", profile, *paths, "--shell", "json"]).code == 0
    (project.dir / "locks" / "not-yet.toml").write_bytes(project.lock_path.read_bytes())
    for _ in range(2):  # the full path, then a recalled answer: both see the lock made
        again = run_cli(["status", profile, *paths])
        assert again.code == 0 and "lock file not found" not in again.out, again.text
    ran = subprocess.run(  # `run` replaces its process: not in this one
        [sys.executable, "-m", "kvenv", "run", profile, *paths, "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
