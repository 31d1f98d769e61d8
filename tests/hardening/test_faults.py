"""Faults beyond the step boundaries of ``tests/hardening/test_apply_faults.py``:
``kvenv apply`` SIGKILLed
at seeded random points *inside* four kinds of apply, a full disk (a real ENOSPC from a
small tmpfs), and a dropped connection (the loopback Hub server closing mid-body).

The kinds (:data:`KINDS`), each a switch between two native versions unless said otherwise:

- ``cold``: a fresh cache (and so a fresh store) for every run: it downloads, unpacks, links;
- ``warm``: the cache and store already hold both versions: a new generation is linked from the
  store (kills land in linking, the manifest, the switch, the shims);
- ``repair``: ``kvenv apply --repair`` over the applied root, same version (kills land in
  re-hashing the cache and store, verification and the rebuilt generation);
- ``bundle``: ``kvenv apply --offline --from BUNDLE`` into a fresh cache.

The kill points come from a counting run per kind and target version: the driver in
:mod:`tests.support.hardening` records every Python function call made inside kvenv,
``installer`` and ``huggingface_hub`` with its phase (:data:`tests.support.hardening.PHASES`);
a seeded draw picks call numbers, round-robin over the phases that kind's run has, *without
replacement* within a kind, so every (kind, call number) point is distinct; the killed run
SIGKILLs itself at that call.

After every fault: the state is whole (the old generation, or the new one if the switch had
happened) and ``kvenv verify`` passes; a rerun of the same command converges to the new state
with nothing left over. ``inconsistent`` counts the runs where any of that did not hold: it
must be 0. The kinds run on separate projects, roots and caches, two at a time
(``KVENV_KILL_WORKERS``); ``kvenv verify`` runs in this process, one at a time.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from kvenv.env.root import current_state, list_generations
from kvenv.env.seal import remove_sealed
from kvenv.env.verify import verify_files
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    LOCAL_TARGET,
    REPO,
    REVISION,
    helper_wheel,
    native_wheel,
    write_project,
)
from tests.support.hardening import (
    FAULT_CALL,
    FAULT_COUNT,
    PHASES,
    kvenv_argv,
    kvenv_env,
    record_figures,
    run_cli,
)
from tests.support.hubserver import HubServer, hub_server
from tests.support.wheels import build_wheel

__all__ = ["hub_server"]

SEED = 20260823
KINDS = ("cold", "warm", "repair", "bundle")
_IN_PROCESS = threading.Lock()  # run_cli redirects this process's stdout: one at a time


@attrs.define
class Scenario:
    """A project with two native versions on the Hub; ``current`` is the applied one.
    ``kind`` decides the command and the cache of each run (see the module doc)."""

    dir: Path
    root: Path
    wheels: dict[str, Path]
    helper: Path
    current: str = "1.0"
    caches: int = 0
    kind: str = "cold"
    warm: Path | None = None
    bundles: dict[str, Path] = attrs.field(factory=dict)

    def target(self) -> str:
        if self.kind == "repair":
            return self.current
        return "1.1" if self.current == "1.0" else "1.0"

    def write(self, version: str) -> None:
        write_project(
            self.dir,
            native=self.wheels[version],
            overlay=[self.helper],
            source="hf",
            target=LOCAL_TARGET,
        )

    @property
    def profile(self) -> str:
        return str(self.dir / "profiles" / "t.toml")

    def fresh_cache(self) -> Path:
        self.caches += 1
        return self.dir.parent / f"cache-{self.caches}"

    def run_cache(self) -> Path:
        """The cache a run of this kind uses: the shared warm one, or a fresh one."""
        if self.kind in ("warm", "repair") and self.warm is not None:
            return self.warm
        return self.fresh_cache()

    def args(self, version: str, cache: Path) -> list[str]:
        args = ["apply", self.profile, "--root", str(self.root), "--cache", str(cache)]
        if self.kind == "repair":
            args.append("--repair")
        if self.kind == "bundle" and version in self.bundles:
            args += ["--offline", "--from", str(self.bundles[version])]
        return [*args, "--jobs", "2"]

    def where(self, cache: Path) -> Locations:
        return Locations(root=self.root, cache=cache)


@attrs.define
class Figures:
    runs: int = 0
    killed: int = 0
    inconsistent: int = 0
    by_phase: dict[str, int] = attrs.field(factory=dict)
    problems: list[str] = attrs.field(factory=list)
    points: set[tuple[str, int]] = attrs.field(factory=set)
    seconds: float = 0.0


def _apply(
    scenario: Scenario, cache: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kvenv_argv(scenario.args(scenario.target(), cache)),
        env=kvenv_env(extra),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _wheels(directory: Path, blob: int) -> tuple[Path, Path, Path]:
    """The old and new native wheels and the helper wheel, built once per test."""
    old = native_wheel(directory / "v1")
    files: dict[str, bytes | str] = {
        "nativepkg/__init__.py": "VERSION = '1.1'\ndef main():\n    print('native 1.1')\n",
        "nativepkg/blob.bin": random.Random(SEED).randbytes(blob),
    }
    new = build_wheel(directory / "v2", "nativepkg", "1.1", files=files)
    return old, new, helper_wheel(directory)


def make_scenario(
    base: Path,
    hub: HubServer,
    *,
    blob: int = 2 << 20,
    kind: str = "cold",
    built: tuple[Path, Path, Path] | None = None,
) -> Scenario:
    """The project under ``base`` with native 1.0 applied (``built``: wheels to copy in, so
    scenarios sharing one Hub server serve the same bytes)."""
    proj = base / "proj"
    wheels = proj / "wheels"
    if built is None:
        old, new, helper = _wheels(wheels, blob)
    else:
        copies = []
        for wheel in built:
            target = wheels / wheel.parent.relative_to(built[2].parent) / wheel.name
            target.parent.mkdir(parents=True, exist_ok=True)
            copies.append(Path(shutil.copy2(wheel, target)))
        old, new, helper = copies
    for wheel in (old, new):
        hub.add_file(REPO, REVISION, wheel.name, wheel.read_bytes())
    scenario = Scenario(proj, base / "root", {"1.0": old, "1.1": new}, helper, kind=kind)
    scenario.write("1.0")
    first_cache = scenario.fresh_cache()
    first = _apply(scenario, first_cache)
    assert first.returncode == 0, first.stderr
    if kind in ("warm", "repair"):
        scenario.warm = first_cache
    return scenario


def _remove_cache(cache: Path) -> None:
    if cache.exists():
        remove_sealed(cache)


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
    with _IN_PROCESS:
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
    """The phase string of a whole apply of this kind to its target (the other version, or
    the same one for ``repair``)."""
    target = scenario.target()
    scenario.write(target)
    cache = scenario.run_cache()
    out = scenario.dir.parent / f"count-{scenario.caches}-{target}.txt"
    done = _apply(scenario, cache, {FAULT_COUNT: str(out)})
    assert done.returncode == 0, done.stderr
    scenario.current = target
    return out.read_text()


def draw_point(
    phases: str, phase: str, rng: random.Random, used: set[int] | None = None
) -> int | None:
    """A call number (1-based) drawn uniformly among the calls made in ``phase`` and not in
    ``used`` (None when there is none left)."""
    positions = [i + 1 for i, p in enumerate(phases) if p == phase and i + 1 not in (used or ())]
    if used is None:
        assert positions, f"no calls in phase {phase!r}"
    return rng.choice(positions) if positions else None


def prepare(scenario: Scenario) -> dict[str, str]:
    """Bring ``scenario`` to the start of its kind's campaign; the phase strings by target."""
    if scenario.kind == "warm":  # both versions into the warm cache and store, uncounted
        scenario.write("1.1")
        assert converge(scenario, scenario.run_cache(), "1.1") == []
    if scenario.kind == "bundle":
        cache = scenario.dir.parent / "cache-bundles"
        for version in ("1.0", "1.1"):
            scenario.write(version)
            out = scenario.dir.parent / f"bundle-{version}"
            made = subprocess.run(
                kvenv_argv(["bundle", scenario.profile, "-o", str(out), "--cache", str(cache)]),
                env=kvenv_env(),
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            assert made.returncode == 0, made.stderr
            scenario.bundles[version] = out
        scenario.write(scenario.current)
    phases: dict[str, str] = {}
    for _ in range(1 if scenario.kind == "repair" else 2):
        target = scenario.target()
        phases[target] = count_calls(scenario)
    return phases


def kill_campaign(
    scenario: Scenario,
    points: int,
    seed: int = SEED,
    *,
    phases: Sequence[str] = tuple(PHASES),
    deadline: float | None = None,
) -> Figures:
    """``points`` kills of ``scenario``'s kind, round-robin over ``phases`` (letters of
    :data:`PHASES`), each call number at most once; stops early past ``deadline``."""
    started = time.monotonic()
    figures = Figures()
    rng = random.Random(f"{seed}-{scenario.kind}")
    counted = prepare(scenario)
    used: set[int] = set()
    turn = 0
    old_cache: Path | None = None
    while figures.runs < points and (deadline is None or time.monotonic() < deadline):
        target = scenario.target()
        call = None
        for _ in range(len(phases)):
            phase = phases[turn % len(phases)]
            turn += 1
            call = draw_point(counted[target], phase, rng, used)
            if call is not None:
                break
        if call is None:
            break  # every call of every phase tried
        used.add(call)
        scenario.write(target)
        cache = scenario.run_cache()
        killed = _apply(scenario, cache, {FAULT_CALL: str(call)})
        figures.runs += 1
        figures.points.add((scenario.kind, call))
        name = PHASES[phase]
        figures.by_phase[name] = figures.by_phase.get(name, 0) + 1
        if killed.returncode == -signal.SIGKILL:
            figures.killed += 1
        elif killed.returncode != 0:
            figures.problems.append(f"call {call}: exit {killed.returncode} {killed.stderr[:200]}")
        problems = check_state(scenario, cache, {scenario.current, target})
        problems += converge(scenario, cache, target)
        if problems:
            figures.inconsistent += 1
            figures.problems.append(f"{scenario.kind} call {call} ({name}): {problems}")
        if old_cache is not None and old_cache not in (cache, scenario.warm):
            _remove_cache(old_cache)  # the previous generation's store: no longer current
        old_cache = cache
    figures.seconds = time.monotonic() - started
    return figures


def campaigns(
    base: Path,
    hub: HubServer,
    points: dict[str, int],
    *,
    workers: int = 2,
    blob: int = 1 << 20,
    deadline: float | None = None,
) -> dict[str, Figures]:
    """One :func:`kill_campaign` per kind in ``points``, on separate projects, roots and caches,
    ``workers`` at a time."""
    built = _wheels(base / "wheels", blob)

    def one(kind: str) -> Figures:
        scenario = make_scenario(base / kind, hub, kind=kind, built=built)
        return kill_campaign(scenario, points[kind], deadline=deadline)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(zip(points, pool.map(one, points), strict=True))
    return results


def test_kill_inside_downloads_and_installs(tmp_path: Path, hub_server: HubServer) -> None:
    scenario = make_scenario(tmp_path, hub_server)
    figures = kill_campaign(scenario, points=4, phases="di")
    assert figures.inconsistent == 0, figures.problems
    assert figures.killed >= 3, figures
    assert set(figures.by_phase) == {"download", "install"}


def test_kill_sample_of_every_kind(tmp_path: Path, hub_server: HubServer) -> None:
    """The default suite's sample of the exhaustive campaign: two points of each kind."""
    results = campaigns(tmp_path, hub_server, {kind: 2 for kind in KINDS}, blob=256 << 10)
    for kind, figures in results.items():
        assert figures.inconsistent == 0, (kind, figures.problems)
        assert figures.runs == 2 and figures.killed >= 1, (kind, figures)
        assert len(figures.points) == 2, (kind, figures.points)


def test_dropped_connection_keeps_the_old_state(tmp_path: Path, hub_server: HubServer) -> None:
    scenario = make_scenario(tmp_path, hub_server)
    scenario.write("1.1")
    hub_server.tamper(scenario.wheels["1.1"].name, "short")
    cache = scenario.fresh_cache()
    dropped = _apply(scenario, cache)
    assert dropped.returncode == 2, dropped.stderr
    assert "kvenv: error:" in dropped.stderr and "Traceback" not in dropped.stderr
    for retry in ("Retrying in", "Trying to resume", "Error while downloading"):
        assert retry not in dropped.stderr, dropped.stderr  # the library's own lines: silenced
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
    inodes = {(f.stat().st_ino, f.stat().st_size) for f in small_disk.rglob("*") if f.is_file()}
    used = sum(size for _, size in inodes)  # a hard link (store -> generation) counted once
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
    """At least 1,000 distinct (kind, call number) points across the four kinds
    (``KVENV_KILL_POINTS`` per kind, default 250; ``KVENV_KILL_MINUTES`` stops drawing new
    points after that many minutes, and the figures then say how many ran)."""
    per_kind = int(os.environ.get("KVENV_KILL_POINTS") or 250)
    minutes = float(os.environ.get("KVENV_KILL_MINUTES") or 0)
    workers = int(os.environ.get("KVENV_KILL_WORKERS") or 2)
    started = time.monotonic()
    deadline = started + minutes * 60 if minutes else None
    results = campaigns(
        tmp_path,
        hub_server,
        {kind: per_kind for kind in KINDS},
        workers=workers,
        deadline=deadline,
    )
    points = {p for figures in results.values() for p in figures.points}
    record_figures(
        "faults",
        {
            "kill_points_tried": sum(f.runs for f in results.values()),
            "distinct_points": len(points),
            "killed_runs": sum(f.killed for f in results.values()),
            "inconsistent_states": sum(f.inconsistent for f in results.values()),
            "by_kind": {
                kind: {
                    "points": f.runs,
                    "killed": f.killed,
                    "inconsistent": f.inconsistent,
                    "by_phase": f.by_phase,
                    "seconds": round(f.seconds, 1),
                }
                for kind, f in results.items()
            },
            "workers": workers,
            "seconds": round(time.monotonic() - started, 1),
            "seed": SEED,
        },
    )
    problems = [p for f in results.values() for p in f.problems]
    assert sum(f.inconsistent for f in results.values()) == 0, problems
    if deadline is not None and time.monotonic() >= deadline:
        # stopped by KVENV_KILL_MINUTES: the figures say how many points ran, each judged
        # consistent above; the count the full campaign must reach does not apply
        assert points, results
        return
    assert len(points) >= 4 * per_kind, {k: f.runs for k, f in results.items()}
    assert len(points) >= 1000 or per_kind < 250, len(points)
