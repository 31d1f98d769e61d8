"""Whole snapshots: a recorded Kaggle host plus a real site dir, and this machine live."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

from kvenv.env.wheelinstall import install_wheel
from kvenv.model.snapshot import dumps_snapshot, read_snapshot, snapshot_to_dict
from kvenv.probe.host import build_snapshot, take_snapshot
from kvenv.probe.pyinfo import local_interpreter, machine_platforms
from tests.support import hostfixtures as hf
from tests.support.jsonschema_subset import validate
from tests.support.paths import REPO
from tests.support.wheels import build_wheel

SCHEMA = REPO / "schemas" / "host.schema.json"
SECRET = hf.scenario("kaggle-t4x2")["environ"]["HF_TOKEN"]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    target = tmp_path / "dist-packages"
    target.mkdir()
    files = {
        "torch/__init__.py": "",
        "torch/version.py": "__version__ = '2.10.0+cu128'\ncuda = '12.8'\n",
    }
    install_wheel(build_wheel(tmp_path / "w", "torch", "2.10.0+cu128", files=files), target)
    install_wheel(build_wheel(tmp_path / "w", "numpy", "2.2.6"), target)
    return target


def _kaggle(site: Path) -> dict[str, object]:
    snap = build_snapshot(
        local_interpreter(),
        [str(site)],
        hf.effects("kaggle-t4x2"),
        platforms=["manylinux_2_35_x86_64", "linux_x86_64"],
        now=datetime.datetime(2026, 8, 23, tzinfo=datetime.timezone.utc),
    )
    data: dict[str, object] = snapshot_to_dict(snap)
    return data


def test_recorded_kaggle_host(site: Path) -> None:
    snap = build_snapshot(
        local_interpreter(),
        [str(site)],
        hf.effects("kaggle-t4x2"),
        platforms=["manylinux_2_35_x86_64", "linux_x86_64"],
        now=datetime.datetime(2026, 8, 23, tzinfo=datetime.timezone.utc),
    )
    assert snap.is_kaggle
    assert snap.taken_at == "2026-08-23T00:00:00+00:00"
    assert [d.name for d in snap.distributions] == ["numpy", "torch"]
    assert snap.torch is not None
    assert (snap.torch.version, snap.torch.cuda, snap.torch.location) == (
        "2.10.0+cu128",
        "12.8",
        f"{site}/torch",
    )
    assert snap.torch.cuda_available is None  # only --import-torch can say
    assert snap.driver is not None
    assert (snap.driver.version, snap.driver.cuda_max) == ("580.159.04", "13.0")
    assert [(g.name, g.compute_capability, g.memory_mib) for g in snap.gpus] == [
        ("Tesla T4", "7.5", 15360)
    ] * 2
    assert snap.cuda is not None
    assert (snap.cuda.toolkit_version, snap.cuda.libcuda) == (
        "12.8.93",
        "/usr/local/nvidia/lib64/libcuda.so",
    )
    assert (snap.platform.libc, snap.platform.libc_version, snap.platform.kernel) == (
        "glibc",
        "2.35",
        "6.12.90+",
    )
    assert snap.python.sys_path == [str(site)]
    assert snap.python.tags[-1] == "py30-none-any"
    assert snap.notes == []


def test_snapshot_round_trips_and_matches_the_schema(site: Path, tmp_path: Path) -> None:
    data = _kaggle(site)
    assert validate(data, json.loads(SCHEMA.read_text())) == []
    path = tmp_path / "host.json"
    path.write_text(json.dumps(data))
    assert snapshot_to_dict(read_snapshot(path)) == data


def test_no_environment_and_no_secret_in_a_snapshot(tmp_path: Path) -> None:
    leaky = tmp_path / f"cache-{SECRET}" / "site"
    leaky.mkdir(parents=True)
    snap = build_snapshot(
        local_interpreter(), [str(leaky)], hf.effects("kaggle-t4x2"), platforms=["linux_x86_64"]
    )
    text = dumps_snapshot(snap)
    assert SECRET not in text
    assert "***" in text
    assert "KAGGLE_DOCKER_IMAGE" not in text and "HF_TOKEN" not in text


def test_live_snapshot_of_this_machine() -> None:
    snap = take_snapshot()
    assert snap.python.executable == sys.executable
    assert snap.python.abi is not None
    assert any(d.name == "attrs" for d in snap.distributions)
    data = snapshot_to_dict(snap)
    assert validate(data, json.loads(SCHEMA.read_text())) == []
    if snap.driver is None:
        assert any("no NVIDIA driver" in note for note in snap.notes)


def test_sys_path_override(site: Path) -> None:
    snap = take_snapshot(sys_path=[str(site)])
    assert [d.name for d in snap.distributions] == ["numpy", "torch"]
    assert snap.python.sys_path == [str(site)]


def test_other_interpreter(site: Path) -> None:
    snap = take_snapshot(python=sys.executable)
    assert snap.python.tags == take_snapshot().python.tags
    assert any("isolated mode" in note for note in snap.notes)


def test_machine_platforms_are_this_machines() -> None:
    assert machine_platforms()
