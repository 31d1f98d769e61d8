"""Fault injection: ``kvenv apply`` SIGKILLed at every step boundary and mid-download.

After each kill the state is whole (the old generation before the switch, the new one from the
switch on) and verifies; a rerun ends in the verified new state with nothing left over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.apply import KILL_ENV
from kvenv.env.root import current_state, list_generations
from kvenv.env.verify import verify_files
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    REPO,
    REVISION,
    helper_wheel,
    locations,
    native_wheel,
    write_project,
)
from tests.support.hubserver import HubServer, hub_server
from tests.support.wheels import build_wheel

__all__ = ["hub_server"]

BEFORE_SWITCH = ["fetch", "verify", "install-native", "install-overlay", "write-manifest"]
FROM_SWITCH = ["switch", "write-shims"]
REPO_ROOT = REPO

DRIVER = """
import sys
from kvenv.cli import main
from kvenv._util.urls import allow_loopback_http
from tests.support.paths import REPO
with allow_loopback_http():
    code = main(sys.argv[1:])
sys.exit(code)
"""


def _kvenv(args: list[str], where: Locations, kill: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(KILL_ENV, None)
    if kill:
        env[KILL_ENV] = kill
    env["PYTHONPATH"] = str(REPO_ROOT)
    argv = [sys.executable, "-c", DRIVER, *args, "--root", str(where.root)]
    argv += ["--cache", str(where.cache), "--jobs", "2"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def _state(where: Locations) -> tuple[str, str]:
    pointer, manifest = current_state(where)
    assert pointer is not None and manifest is not None
    assert verify_files(manifest) == []
    assert manifest.native is not None
    return manifest.generation, manifest.native.version


def _setup(tmp_path: Path, hub: HubServer, *, big: bool = False) -> tuple[Path, Path]:
    """A project whose native v1.0 is applied; returns (profile v1.1, project dir)."""
    proj = tmp_path / "proj"
    wheels = proj / "wheels"
    old = native_wheel(wheels / "v1")
    helper = helper_wheel(wheels)
    write_project(proj, native=old, overlay=[helper], source="hf")
    hub.add_file(REPO, REVISION, old.name, old.read_bytes())
    files: dict[str, bytes | str] = {
        "nativepkg/__init__.py": "VERSION = '1.1'\ndef main():\n    print('native 1.1')\n"
    }
    if big:
        files["nativepkg/blob.bin"] = os.urandom(24 << 20)
    new = build_wheel(wheels / "v2", "nativepkg", "1.1", files=files)
    hub.add_file(REPO, REVISION, new.name, new.read_bytes())
    return new, proj


@pytest.mark.parametrize("point", BEFORE_SWITCH + FROM_SWITCH)
def test_kill_at_step_boundary(tmp_path: Path, hub_server: HubServer, point: str) -> None:
    where = locations(tmp_path)
    new, proj = _setup(tmp_path, hub_server)
    profile = str(proj / "profiles" / "t.toml")
    first = _kvenv(["apply", profile], where, None)
    assert first.returncode == 0, first.stderr
    old_generation, old_version = _state(where)
    assert old_version == "1.0"
    write_project(
        proj, native=new, overlay=[proj / "wheels" / "helper-2.0-py3-none-any.whl"], source="hf"
    )
    killed = _kvenv(["apply", profile], where, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    generation, version = _state(where)
    if point in BEFORE_SWITCH:
        assert (generation, version) == (old_generation, "1.0")
    else:
        assert version == "1.1" and generation != old_generation
    rerun = _kvenv(["apply", profile], where, None)
    assert rerun.returncode == 0, rerun.stderr
    generation, version = _state(where)
    assert version == "1.1"
    assert set(list_generations(where)) <= {generation, old_generation}
    assert f"generations/{generation}/" in (where.root / "activate.sh").read_text()


def test_kill_mid_download(tmp_path: Path, hub_server: HubServer) -> None:
    where = locations(tmp_path)
    new, proj = _setup(tmp_path, hub_server, big=True)
    profile = str(proj / "profiles" / "t.toml")
    assert _kvenv(["apply", profile], where, None).returncode == 0
    old_generation, _ = _state(where)
    write_project(
        proj, native=new, overlay=[proj / "wheels" / "helper-2.0-py3-none-any.whl"], source="hf"
    )
    killed = _kvenv(["apply", profile], where, "mid-fetch")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _state(where) == (old_generation, "1.0")
    rerun = _kvenv(["apply", profile], where, None)
    assert rerun.returncode == 0, rerun.stderr
    assert _state(where)[1] == "1.1"
