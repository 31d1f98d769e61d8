"""Apply end to end, hermetic: the native wheel from a loopback Hub server through the real
huggingface_hub, the overlay from a local wheelhouse, a fake host with a protected "torch".
Every failure leaves the previous state current and intact."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kvenv.env.apply import ApplyResult
from kvenv.env.root import current_state, list_generations
from kvenv.env.verify import verify
from kvenv.errors import ConflictError, FetchError, IntegrityError
from kvenv.model.locations import Locations
from tests.support import paths
from tests.support.applyenv import (
    REPO,
    REVISION,
    Project,
    apply,
    fake_host_site,
    helper_wheel,
    host_snapshot,
    locations,
    native_wheel,
    standard_project,
    write_project,
)
from tests.support.hubserver import HubServer, hub_server
from tests.support.wheels import build_wheel

__all__ = ["hub_server"]


def _apply(
    project: Project,
    where: Locations,
    site: Path,
    *,
    wait: bool = True,
    on_wait: Callable[[str], None] = print,
) -> ApplyResult:
    return apply(
        project.loaded(),
        project.lock(),
        host_snapshot(site),
        where,
        jobs=2,
        wait=wait,
        on_wait=on_wait,
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".kv"):
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture
def env(tmp_path: Path) -> tuple[Project, Locations, Path]:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    return project, locations(tmp_path), site


def test_apply_activate_status_verify(env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    result = _apply(project, where, site)
    assert result.status == "applied"
    pointer, manifest = current_state(where)
    assert pointer is not None and manifest is not None
    assert [d.name for d in manifest.distributions] == ["nativepkg", "helper"]
    assert [d.layer for d in manifest.distributions] == ["native", "overlay"]
    assert manifest.host_protected[0].version == "2.10.0"
    assert verify(manifest, host_snapshot(site)) == []
    # activation in a child interpreter: overlay wins over the host's helper, torch is the host's
    code = (
        "import kvenv, os, sys\n"
        "assert kvenv.activate() is True\n"
        "import helper, torch, nativepkg, sub_mod\n"
        "print(helper.V, torch.__file__.startswith(os.environ['HOST_SITE']),\n"
        "      os.environ['HELPER_PTH'], os.environ['DEMO_VAR'])\n"
    )
    child = dict(os.environ)
    child.update(
        PYTHONPATH=f"{paths.REPO}:{site}",
        HOST_SITE=str(site),
        KVENV_MANIFEST=str(where.generations / manifest.generation / "manifest.json"),
    )
    run = _run_python(code, child)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["helper-2.0", "True", "ran", "it's", "here"]
    # the console script runs with the host interpreter and the activation
    shim = where.root / "activate.sh"
    bash = subprocess.run(
        ["bash", "-c", f'. "{shim}" && nativecli'],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert bash.returncode == 0, bash.stderr
    assert bash.stdout == "native 1.0 helper-2.0\n"


def test_second_apply_is_a_noop(env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    first = _apply(project, where, site)
    before = _snapshot(where.root)
    again = _apply(project, where, site)
    assert again.status == "up-to-date"
    assert again.generation == first.generation
    assert _snapshot(where.root) == before


def test_new_generation_keeps_previous_and_collects_older(
    tmp_path: Path, env: tuple[Project, Locations, Path]
) -> None:
    project, where, site = env
    gens = []
    for version in ("2.0", "2.1", "2.2"):
        wheel = helper_wheel(project.dir / "more", version)
        p = write_project(project.dir, native=project.native, overlay=[wheel])
        gens.append(_apply(p, where, site).generation)
    assert list_generations(where) == sorted(gens[1:])
    pointer, manifest = current_state(where)
    assert pointer is not None and pointer.previous == gens[1]
    assert manifest is not None and manifest.distributions[1].version == "2.2"


def test_native_from_loopback_hub(tmp_path: Path, hub_server: HubServer) -> None:
    project = standard_project(tmp_path / "proj", source="hf")
    hub_server.add_file(REPO, REVISION, project.native.name, project.native.read_bytes())
    project.native.unlink()  # only the Hub has it now
    site = fake_host_site(tmp_path)
    result = _apply(project, locations(tmp_path), site)
    assert result.status == "applied"
    assert hub_server.count("GET") >= 1
    _, manifest = current_state(locations(tmp_path))
    assert manifest is not None and manifest.native is not None
    assert manifest.native.source == f"hf:{REPO}@{REVISION}/{project.native.name}"


@pytest.mark.parametrize("mode", ["flip", "truncate", "short"])
def test_corrupt_download_changes_nothing(tmp_path: Path, hub_server: HubServer, mode: str) -> None:
    site = fake_host_site(tmp_path)
    where = locations(tmp_path)
    good = standard_project(tmp_path / "good")
    _apply(good, where, site)
    before = _snapshot(where.root)
    # the same profile file, now pinning a newer native wheel (a root belongs to one profile)
    newer = native_wheel(tmp_path / "good" / "wheels2", "1.1")
    bad = write_project(good.dir, native=newer, overlay=list(good.overlay), source="hf")
    hub_server.add_file(REPO, REVISION, newer.name, newer.read_bytes())
    hub_server.tamper(newer.name, mode)  # flip, truncate or short
    with pytest.raises((IntegrityError, FetchError), match=r"sha256|size|mismatch|bytes"):
        _apply(bad, where, site)
    assert _snapshot(where.root) == before


def test_wrong_size_pin_changes_nothing(
    tmp_path: Path, env: tuple[Project, Locations, Path]
) -> None:
    project, where, site = env
    _apply(project, where, site)
    before = _snapshot(where.root)
    profile = project.profile_path.read_text()
    size = project.native.stat().st_size
    project.profile_path.write_text(profile.replace(f"size = {size}", f"size = {size + 1}"))
    with pytest.raises(IntegrityError, match="size"):
        _apply(project, where, site)
    assert _snapshot(where.root) == before


@pytest.mark.parametrize(
    ("files", "raw", "match"),
    [
        ({"evil/__init__.py": ""}, {"../../escape.py": b"x"}, "path traversal"),
        ({"evil/__init__.py": "", "torch/__init__.py": "hijack"}, None, "protected"),
    ],
)
def test_hostile_overlay_wheel_changes_nothing(
    tmp_path: Path,
    env: tuple[Project, Locations, Path],
    files: dict[str, str],
    raw: dict[str, bytes] | None,
    match: str,
) -> None:
    project, where, site = env
    _apply(project, where, site)
    before = _snapshot(where.root)
    evil = build_wheel(project.dir / "wheels", "evil", "1", files=files, raw_entries=raw)
    hostile = write_project(project.dir, native=project.native, overlay=[*project.overlay, evil])
    with pytest.raises(IntegrityError, match=match):
        _apply(hostile, where, site)
    assert _snapshot(where.root) == before
    assert not (tmp_path / "escape.py").exists()


def test_foreign_directory_is_refused(tmp_path: Path, env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    where.root.mkdir()
    (where.root / "notes.txt").write_text("mine")
    with pytest.raises(ConflictError, match="not created by kvenv"):
        _apply(project, where, site)
    assert sorted(p.name for p in where.root.iterdir()) == ["notes.txt"]


def test_no_wait_names_the_holder(env: tuple[Project, Locations, Path]) -> None:
    from filelock import FileLock

    project, where, site = env
    _apply(project, where, site)
    with FileLock(str(where.lock)):
        (where.root / ".kvenv.lock.owner").write_text("pid 4242 on testhost\n")
        with pytest.raises(ConflictError, match="pid 4242 on testhost"):
            _apply(project, where, site, wait=False)


def test_concurrent_apply_waits(env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    _apply(project, where, site)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock\n"
            f"lock = FileLock({str(where.lock)!r}); lock.acquire()\n"
            "print('locked', flush=True); time.sleep(1.0); lock.release()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    messages: list[str] = []
    result = _apply(project, where, site, on_wait=messages.append)
    holder.wait()
    assert result.status == "up-to-date"
    assert messages and "waiting for another kvenv apply" in messages[0]


def test_bundle_then_offline_apply(tmp_path: Path, env: tuple[Project, Locations, Path]) -> None:
    from kvenv.fetch.bundle import make_bundle

    _, _, site = env
    info = sys.version_info
    target = (
        f'[target]\npython = "{info.major}.{info.minor}"\nabi = "cp{info.major}{info.minor}"\n'
        f'machine = "{platform.machine()}"\n'
    )
    wheels = tmp_path / "proj2" / "wheels"
    project = write_project(
        tmp_path / "proj2",
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels)],
        target=target,
    )
    out = tmp_path / "bundle"
    make_bundle(project.loaded(), out)
    for wheel in (project.native, *project.overlay):
        wheel.unlink()  # only the bundle has them now
    from kvenv.model.loading import load_profile
    from tests.support.applyenv import read_lock_input

    bundled = load_profile(str(next((out / "profiles").glob("*.toml"))))
    lock = read_lock_input(next((out / "locks").glob("*.toml")))
    where = Locations(tmp_path / "offline-root", tmp_path / "offline-cache")
    result = apply(bundled, lock, host_snapshot(site), where, offline=True, bundle=out, jobs=2)
    assert result.status == "applied"
    _, manifest = current_state(where)
    assert manifest is not None and verify(manifest, host_snapshot(site)) == []
    assert json.loads((where.root / "current.json").read_text())["generation"]


def test_protected_version_drift_is_reported(env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    _apply(project, where, site)
    _, manifest = current_state(where)
    assert manifest is not None
    drifts = verify(manifest, host_snapshot(site, torch_version="2.11.0"))
    assert [d.kind for d in drifts] == ["host"]
    assert "2.10.0 at apply time, 2.11.0 now" in drifts[0].message


def test_edited_file_is_drift(env: tuple[Project, Locations, Path]) -> None:
    project, where, site = env
    _apply(project, where, site)
    _, manifest = current_state(where)
    assert manifest is not None
    target = Path(manifest.dirs.overlay) / "helper" / "__init__.py"
    os.unlink(target)  # break the hard link first: the store must stay pristine
    target.write_text("V = 'edited'\n")
    drifts = verify(manifest, host_snapshot(site))
    assert [(d.kind, Path(d.path).name) for d in drifts] == [("modified", "__init__.py")]


def _liar_wheel(directory: Path) -> Path:
    """A wheel whose RECORD gives a wrong hash and size for one file (its bytes are fine)."""
    import zipfile

    wheel = build_wheel(directory, "liar", "1", files={"liar/__init__.py": "X = 1\n"})
    with zipfile.ZipFile(wheel) as zf:
        entries = {info.filename: (info, zf.read(info)) for info in zf.infolist()}
    info, data = entries["liar-1.dist-info/RECORD"]
    text = data.decode().replace("liar/__init__.py,sha256=", "liar/__init__.py,sha256=AAAA", 1)
    entries["liar-1.dist-info/RECORD"] = (info, text.replace(",6\n", ",7\n", 1).encode())
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, content in entries.values():
            zf.writestr(info, content)
    return wheel


def test_record_waiver_and_file_conflict(
    tmp_path: Path, env: tuple[Project, Locations, Path]
) -> None:
    project, where, site = env
    wheels = project.dir / "wheels"
    zeta = build_wheel(wheels, "zeta", "1", files={"zeta/a.py": "", "build_backend.py": "Z = 1\n"})
    alpha = build_wheel(wheels, "alpha", "1", files={"alpha/a.py": "", "build_backend.py": "A\n"})
    overlay = [*project.overlay, zeta, _liar_wheel(wheels), alpha]
    unwaived = write_project(project.dir, native=project.native, overlay=overlay)
    with pytest.raises(IntegrityError, match=r"does not match its RECORD: .*liar/__init__.py"):
        _apply(unwaived, where, site)
    assert not where.root.exists() or current_state(where) == (None, None)
    waiver = '\n[[overlay.record_waivers]]\nname = "Liar"\nreason = "published with a bad RECORD"\n'
    with unwaived.profile_path.open("a") as stream:
        stream.write(waiver)
    result = _apply(unwaived, where, site)
    _, manifest = current_state(where)
    assert manifest is not None
    lies = {d.name: d.record_waived for d in manifest.distributions}
    assert [m.file for m in lies["liar"]] == ["liar/__init__.py"]
    assert lies["liar"][0].expected.endswith(",7") and lies["liar"][0].actual.endswith(",6")
    assert not any(v for k, v in lies.items() if k != "liar")
    assert [(c.file, c.winner, c.loser) for c in manifest.conflicts] == [
        ("build_backend.py", "alpha", "zeta")
    ]
    assert (Path(manifest.dirs.overlay) / "build_backend.py").read_text() == "A\n"
    assert len(result.warnings) == 2
    assert "liar 1: liar/__init__.py does not match its RECORD" in result.warnings[0]
    assert "alpha and zeta both provide build_backend.py" in result.warnings[1]
    # verify checks the winner's file and the waived wheel's actual digests: no drift
    assert verify(manifest, host_snapshot(site)) == []
    from kvenv.env.verify import shadowed

    assert shadowed(manifest) == [
        "zeta's build_backend.py is shadowed by alpha's (checked against alpha's RECORD)"
    ]
    (Path(manifest.dirs.overlay) / "build_backend.py").write_text("edited\n")
    drifts = verify(manifest, host_snapshot(site))
    assert [(d.kind, Path(d.path).name) for d in drifts] == [("modified", "build_backend.py")]
    # the store entry was made under the waiver; a profile without it still refuses
    without = write_project(project.dir, native=project.native, overlay=overlay, name="other")
    elsewhere = Locations(tmp_path / "other-root", where.cache)  # its own root, the same store
    with pytest.raises(IntegrityError, match=r"liar 1 \(1 file\(s\): liar/__init__.py\)"):
        _apply(without, elsewhere, site)
