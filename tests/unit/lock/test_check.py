"""``kvenv lock --check`` and the lock reading API: accepts what the engine writes, rejects
each single mutation, reports staleness (exit 1) and malformed files (exit 2) precisely."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib

from kvenv.cli import main
from kvenv.errors import LockError
from kvenv.lock.check import check_lock
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.pylock import parse_lock, read_lock, write_lock
from kvenv.lock.sources import IndexConfig
from kvenv.model.loading import LoadedProfile, load_profile
from kvenv.model.snapshot import read_snapshot
from tests.support.lockenv import HOST_TORCH, basic_house, write_project
from tests.support.paths import REPO

ROOT = REPO


@pytest.fixture
def locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LoadedProfile, Path]:
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    root = tmp_path / "p"
    loaded = write_project(root, distributions=[HOST_TORCH])
    house = basic_house(root / "house")
    options = LockOptions(
        index=IndexConfig(find_links=(str(house),), no_index=True), cache_dir=tmp_path / "c"
    )
    result = lock_profile(loaded, options)
    write_lock(result.path, result.text)
    monkeypatch.chdir(root)
    return loaded, result.path


def run_check(loaded: LoadedProfile, doc: dict[str, Any], tmp_path: Path) -> bool:
    """True when the check accepts ``doc``; a malformed document counts as rejected."""
    path = tmp_path / "mutated" / "pylock.testbox.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(tomli_w.dumps(doc))
    try:
        lock = read_lock(path)
    except LockError:
        return False
    assert loaded.snapshot_path is not None
    return check_lock(loaded, lock, read_snapshot(loaded.snapshot_path)).ok


def test_the_check_accepts_a_fresh_lock(
    locked: tuple[LoadedProfile, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lock", "testbox", "--check"]) == 0
    assert "ok:" in capsys.readouterr().out
    assert main(["lock", "testbox", "--check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["problems"] == [] and report["stale"] == []


def _mutations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def mutate(label: str) -> dict[str, Any]:
        out[label] = copy.deepcopy(doc)
        return out[label]

    mutate("hash removed")["packages"][0]["wheels"][0]["hashes"] = {"md5": "0" * 32}
    mutate("hashes emptied")["packages"][0]["wheels"][0]["hashes"] = {}
    mutate("size removed")["packages"][0]["wheels"][0].pop("size")
    torch = copy.deepcopy(doc["packages"][0])
    torch.update(name="torch", version="2.10.0")
    torch["wheels"][0]["name"] = "torch-2.10.0-py3-none-any.whl"
    torch["wheels"][0]["path"] = "../house/torch-2.10.0-py3-none-any.whl"
    mutate("torch added")["packages"].append(torch)
    for index, package in enumerate(doc["packages"]):
        mutate(f"{package['name']} dropped")["packages"].pop(index)
    mutate("version changed")["packages"][1]["version"] = "9.9.9"
    renamed = mutate("version and wheel changed")["packages"][1]
    renamed["version"] = "1.0.0"
    renamed["wheels"][0]["name"] = renamed["wheels"][0]["name"].replace("2.1.0", "1.0.0")
    mutate("marker broken")["packages"][0]["marker"] = 'sys_platform == "win32"'
    mutate("marker garbled")["packages"][0]["marker"] = "python_version >>> '3'"
    mutate("requires lost")["packages"][0]["tool"]["kvenv"].pop("requires")
    mutate("native sha changed")["tool"]["kvenv"]["native"]["sha256"] = "0" * 64
    position = next(i for i, p in enumerate(doc["packages"]) if p["name"] == "nativepkg")
    mutate("native unmarked")["packages"][position]["tool"]["kvenv"].pop("native")
    mutate("native package's sha changed")["packages"][position]["wheels"][0]["hashes"] = {
        "sha256": "1" * 64
    }
    mutate("native package's version changed")["packages"][position]["version"] = "1.0.0"
    mutate("native package's size changed")["packages"][position]["wheels"][0]["size"] = 1
    mutate("a second native")["packages"][0]["tool"]["kvenv"]["native"] = True
    mutate("wheel for another platform")["packages"][1]["wheels"][0]["name"] = (
        "beta-2.1.0-cp312-cp312-win_amd64.whl"
    )
    return out


def test_each_single_mutation_is_rejected(
    locked: tuple[LoadedProfile, Path], tmp_path: Path
) -> None:
    loaded, path = locked
    doc = tomllib.loads(path.read_text())
    assert run_check(loaded, doc, tmp_path)
    names = [p["name"] for p in doc["packages"]]
    assert names == ["alpha", "beta", "delta", "nativepkg", "six"]
    for label, mutated in _mutations(doc).items():
        assert not run_check(loaded, mutated, tmp_path), label


def test_a_stale_lock_exits_1_and_says_what_changed(
    locked: tuple[LoadedProfile, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    loaded, _ = locked
    profile = loaded.path
    profile.write_text(profile.read_text().replace('glibc = "2.35"', 'glibc = "2.39"'))
    assert main(["lock", "testbox", "--check"]) == 1
    err = capsys.readouterr().err
    assert "profile changed" in err and "manylinux_2_39_x86_64" in err
    snap = loaded.snapshot_path
    assert snap is not None
    data = json.loads(snap.read_text())
    data["distributions"].append({"name": "extra-host-pkg", "version": "1.0"})
    snap.write_text(json.dumps(data))
    assert main(["lock", "testbox", "--check", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert any("host snapshot changed" in s for s in report["stale"])


def test_a_malformed_lock_exits_2_with_the_json_path(
    locked: tuple[LoadedProfile, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = locked
    doc = tomllib.loads(path.read_text())
    doc["packages"][2]["wheels"][0]["name"] = "not a wheel name"
    path.write_text(tomli_w.dumps(doc))
    assert main(["lock", "testbox", "--check"]) == 2
    err = capsys.readouterr().err
    assert "$.packages[2].wheels[0]" in err and "Traceback" not in err
    path.write_text("lock-version = [")
    assert main(["lock", "testbox", "--check"]) == 2
    assert "invalid TOML" in capsys.readouterr().err


def test_tool_table_problems_carry_kebab_paths() -> None:
    doc = {
        "lock-version": "1.0",
        "created-by": "kvenv",
        "packages": [],
        "tool": {"kvenv": {"schema": 1, "profile": "x", "profile-digest": 5, "protected": []}},
    }
    with pytest.raises(LockError) as info:
        parse_lock(doc, file="pylock.x.toml")
    paths = {p.path for p in info.value.problems}
    assert "$.tool.kvenv.profile-digest" in paths
    assert "$.tool.kvenv.native" in paths
    with pytest.raises(LockError, match="not a kvenv lock"):
        parse_lock({"lock-version": "1.0", "created-by": "x", "packages": []}, file="f")


def test_read_lock_api(locked: tuple[LoadedProfile, Path]) -> None:
    _, path = locked
    lock = read_lock(path)
    assert lock.kvenv.profile == "testbox"
    assert lock.kvenv.native.requires == ["torch==2.10.0", "alpha>=1.0"]
    assert [p.name for p in lock.pylock.packages] == ["alpha", "beta", "delta", "nativepkg", "six"]
    assert [bool(t and t.native) for t in lock.package_tools] == [False] * 3 + [True, False]
    assert lock.package_tools[1] is not None and lock.package_tools[1].extras == ["fast"]


def test_missing_lock_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_project(tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    assert main(["lock", "testbox", "--check"]) == 2
    assert "kvenv lock testbox" in capsys.readouterr().err


def test_the_builtin_kaggle_lock_passes_its_check_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["lock", "--check", "kaggle-t4x2-cu128"]) == 0
    loaded = load_profile("kaggle-t4x2-cu128")
    lock = read_lock(loaded.lock_path)
    got = {p.name: str(p.version) for p in lock.pylock.packages}
    reference = ROOT / "locks" / "pylock.kaggle-t4x2-cu128.toml"
    assert reference == loaded.lock_path
    assert not lock.kvenv.requires  # no one-off roots: the profile declares its pins
    pins = [str(r) for r in loaded.profile.overlay.requires]
    assert len(pins) == 47
    for pin in pins:
        name, _, version = pin.partition("==")
        from packaging.utils import canonicalize_name

        assert got[canonicalize_name(name)] == version, pin
    assert not {"torch", "torchvision", "torchaudio"} & set(got)
    for package in lock.pylock.packages:
        (wheel,) = package.wheels or []
        assert wheel.size and len(wheel.hashes["sha256"]) == 64
        # portable: no index host in the committed file, the wheel by name in ../wheels/
        assert wheel.url is None and package.index is None
        assert wheel.path == f"../wheels/{wheel.filename}"
        assert loaded.profile.target is not None
    assert lock.kvenv.portable
    assert "://" not in reference.read_text()
    assert lock.kvenv.native.requires_from == "file overlay-requirements.txt"
    assert len(lock.kvenv.native.requires) == 54
