"""Faults beyond the step boundaries of ``tests/hardening/test_apply_faults.py``:
``kvenv apply`` SIGKILLed
at seeded random points *inside* downloads and installs, a full disk (a real ENOSPC from a
small tmpfs), and a dropped connection (the loopback Hub server closing mid-body).

The kill points come from a counting run: the driver in :mod:`tests.support.hardening` records
every Python function call made inside kvenv, ``installer`` and ``huggingface_hub`` with its
phase (download / install / other), and a seeded draw picks call numbers in the download and
install phases; the killed run SIGKILLs itself at that call. Each kill uses a fresh cache, so
every run really downloads and unpacks.

After every fault: the state is whole (the old generation, or the new one if the switch had
happened) and ``kvenv verify`` passes; a rerun converges to the new state with nothing left
over. ``inconsistent`` counts the runs where any of that did not hold: it must be 0.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from kvenv.env.root import current_state, list_generations
from kvenv.env.verify import verify_files
from kvenv.model.locations import Locations
from tests.support.applyenv import REPO, REVISION, helper_wheel, native_wheel, write_project
from tests.support.hardening import (
    FAULT_CALL,
    FAULT_COUNT,
    kvenv_argv,
    kvenv_env,
    record_figures,
    run_cli,
)
from tests.support.hubserver import HubServer, hub_server
from tests.support.wheels import build_wheel

__all__ = ["hub_server"]

SEED = 20260823


@attrs.define
class Scenario:
    """A project with two native versions on the Hub; ``current`` is the applied one."""

    dir: Path
    root: Path
    wheels: dict[str, Path]
    helper: Path
    current: str = "1.0"
    caches: int = 0

    def target(self) -> str:
        return "1.1" if self.current == "1.0" else "1.0"

    def write(self, version: str) -> None:
        write_project(self.dir, native=self.wheels[version], overlay=[self.helper], source="hf")

    @property
    def profile(self) -> str:
        return str(self.dir / "profiles" / "t.toml")

    def fresh_cache(self) -> Path:
        self.caches += 1
        return self.dir.parent / f"cache-{self.caches}"

    def where(self, cache: Path) -> Locations:
        return Locations(root=self.root, cache=cache)


@attrs.define
class Figures:
    runs: int = 0
    killed: int = 0
    inconsistent: int = 0
    by_phase: dict[str, int] = attrs.field(factory=dict)
    problems: list[str] = attrs.field(factory=list)


def _apply(
    scenario: Scenario, cache: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = ["apply", scenario.profile, "--root", str(scenario.root), "--cache", str(cache)]
    return subprocess.run(
        kvenv_argv([*args, "--jobs", "2"]),
        env=kvenv_env(extra),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def make_scenario(base: Path, hub: HubServer, *, blob: int = 2 << 20) -> Scenario:
    proj = base / "proj"
    wheels = proj / "wheels"
    old = native_wheel(wheels / "v1")
    files: dict[str, bytes | str] = {
        "nativepkg/__init__.py": "VERSION = '1.1'\ndef main():\n    print('native 1.1')\n",
        "nativepkg/blob.bin": random.Random(SEED).randbytes(blob),
    }
    new = build_wheel(wheels / "v2", "nativepkg", "1.1", files=files)
    for wheel in (old, new):
        hub.add_file(REPO, REVISION, wheel.name, wheel.read_bytes())
    scenario = Scenario(proj, base / "root", {"1.0": old, "1.1": new}, helper_wheel(wheels))
    scenario.write("1.0")
    first = _apply(scenario, scenario.fresh_cache())
    assert first.returncode == 0, first.stderr
    return scenario


def check_state(scenario: Scenario, cache: Path, allowed: set[str]) -> list[str]:
    """What is wrong with the root now (empty when whole and verified)."""
    where = scenario.where(cache)
    try:
        pointer, manifest = current_state(where)
    except Exception as exc:  # any failure to read the state is an inconsistency
        return [f"state unreadable: {exc}"]
    if pointer is None or manifest is None or manifest.native is None:
        return ["no current generation"]
    problems = [f"drift: {d}" for d in verify_files(manifest)]
    if manifest.native.version not in allowed:
        problems.append(f"version {manifest.native.version} not in {sorted(allowed)}")
    shim = scenario.root / "activate.sh"
    text = shim.read_text() if shim.is_file() else ""
    live = [g for g in list_generations(where) if f"generations/{g}/" in text]
    if len(live) != 1 or not (scenario.root / "generations" / live[0] / "manifest.json").is_file():
        problems.append("activate.sh does not name one complete generation")
    result = run_cli(
        ["verify", scenario.profile, "--root", str(scenario.root), "--cache", str(cache)]
    )
    if result.code != 0:
        problems.append(f"kvenv verify exit {result.code}: {result.err.strip()[:300]}")
    return problems


def converge(scenario: Scenario, cache: Path, target: str) -> list[str]:
    """Rerun the apply; it must succeed and leave only the current and previous generations."""
    rerun = _apply(scenario, cache)
    if rerun.returncode != 0:
        return [f"rerun exit {rerun.returncode}: {rerun.stderr.strip()[:300]}"]
    problems = check_state(scenario, cache, {target})
    pointer, _ = current_state(scenario.where(cache))
    keep = {pointer.generation, pointer.previous} if pointer else set()
    extra = set(list_generations(scenario.where(cache))) - keep
    if extra:
        problems.append(f"left-over generations {sorted(extra)}")
    stray = [p.name for p in scenario.root.iterdir() if p.name.endswith(".tmp")]
    if stray:
        problems.append(f"stray temp files {stray}")
    scenario.current = target
    return problems


def count_calls(scenario: Scenario) -> str:
    """The phase string of a whole apply to the other version (then put back by a rerun)."""
    target = scenario.target()
    scenario.write(target)
    cache = scenario.fresh_cache()
    out = scenario.dir.parent / f"count-{scenario.caches}.txt"
    done = _apply(scenario, cache, {FAULT_COUNT: str(out)})
    assert done.returncode == 0, done.stderr
    scenario.current = target
    return out.read_text()


def draw_point(phases: str, phase: str, rng: random.Random) -> int:
    """A call number (1-based) drawn uniformly among the calls made in ``phase``."""
    positions = [i + 1 for i, p in enumerate(phases) if p == phase]
    assert positions, f"no calls in phase {phase!r}"
    return rng.choice(positions)


def kill_campaign(scenario: Scenario, points: int, seed: int = SEED) -> Figures:
    figures = Figures()
    rng = random.Random(seed)
    phases: dict[str, str] = {}
    for _ in range(2):
        target = scenario.target()
        phases[target] = count_calls(scenario)
    for index in range(points):
        target = scenario.target()
        phase = "d" if index % 2 == 0 else "i"
        call = draw_point(phases[target], phase, rng)
        scenario.write(target)
        cache = scenario.fresh_cache()
        killed = _apply(scenario, cache, {FAULT_CALL: str(call)})
        figures.runs += 1
        name = {"d": "download", "i": "install"}[phase]
        figures.by_phase[name] = figures.by_phase.get(name, 0) + 1
        if killed.returncode == -signal.SIGKILL:
            figures.killed += 1
        elif killed.returncode != 0:
            figures.problems.append(f"call {call}: exit {killed.returncode} {killed.stderr[:200]}")
        problems = check_state(scenario, cache, {scenario.current, target})
        problems += converge(scenario, cache, target)
        if problems:
            figures.inconsistent += 1
            figures.problems.append(f"call {call} ({name}): {problems}")
    return figures


def test_kill_inside_downloads_and_installs(tmp_path: Path, hub_server: HubServer) -> None:
    scenario = make_scenario(tmp_path, hub_server)
    figures = kill_campaign(scenario, points=4)
    assert figures.inconsistent == 0, figures.problems
    assert figures.killed >= 3, figures
    assert set(figures.by_phase) == {"download", "install"}


def test_dropped_connection_keeps_the_old_state(tmp_path: Path, hub_server: HubServer) -> None:
    scenario = make_scenario(tmp_path, hub_server)
    scenario.write("1.1")
    hub_server.tamper(scenario.wheels["1.1"].name, "short")
    cache = scenario.fresh_cache()
    dropped = _apply(scenario, cache)
    assert dropped.returncode == 2, dropped.stderr
    assert "kvenv: error:" in dropped.stderr and "Traceback" not in dropped.stderr
    assert check_state(scenario, cache, {"1.0"}) == []
    hub_server.tamper(scenario.wheels["1.1"].name, None)
    assert converge(scenario, cache, "1.1") == []


# -- a full disk -------------------------------------------------------------------------------


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _resize(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only; skipped elsewhere): writes past it fail with ENOSPC."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("mounting a tmpfs needs root (the full-disk case runs in CI as root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("free", ["3m", "6m"], ids=["fails-in-download", "fails-in-install"])
def test_full_disk_keeps_the_old_state(
    tmp_path: Path, hub_server: HubServer, small_disk: Path, free: str
) -> None:
    """Root and cache on a small tmpfs: the old state fits, the 2.5 MiB new wheel does not
    (3m: not even the download; 6m: the download fits, unpacking it does not)."""
    _resize(small_disk, "64m")
    scenario = make_scenario(small_disk, hub_server, blob=5 << 19)
    cache = small_disk / "cache-1"
    used = sum(f.stat().st_size for f in small_disk.rglob("*") if f.is_file())
    _resize(small_disk, f"{used // 1024 + int(free[0]) * 1024 - 2048}k")
    scenario.write("1.1")
    full = _apply(scenario, cache)
    assert full.returncode == 2, (full.returncode, full.stderr)
    assert "No space left on device" in full.stderr and "Traceback" not in full.stderr
    assert check_state(scenario, cache, {"1.0"}) == []
    _resize(small_disk, "64m")
    assert converge(scenario, cache, "1.1") == []


# -- the exhaustive variant --------------------------------------------------------------------


@pytest.mark.slow
def test_kill_campaign_exhaustive(tmp_path: Path, hub_server: HubServer) -> None:
    scenario = make_scenario(tmp_path, hub_server)
    figures = kill_campaign(scenario, points=60)
    record_figures(
        "faults",
        {
            "kill_points_tried": figures.runs,
            "killed_runs": figures.killed,
            "kill_points_by_phase": figures.by_phase,
            "inconsistent_states": figures.inconsistent,
            "seed": SEED,
        },
    )
    assert figures.inconsistent == 0, figures.problems
