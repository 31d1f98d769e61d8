"""``kvenv apply --from BUNDLE``: the bundle is opened and verified once, its own profile is
used when none is named, nothing touches the network, and a corrupt bundle is refused before
a runtime root exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.env.root import current_state
from kvenv.fetch.bundle import make_bundle
from kvenv.model.locations import Locations
from tests.support.applyenv import local_project


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    project = local_project(tmp_path / "proj")
    make_bundle(project.loaded(), tmp_path / "bundle", cache=tmp_path / "first-cache")
    return tmp_path / "bundle"


def test_apply_from_a_bundle_uses_its_profile(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    code = main(["apply", "--from", str(bundle), "--root", str(root), "--cache", str(cache)])
    assert code == 0
    assert "applied t: generation" in capsys.readouterr().out
    _, manifest = current_state(Locations(root, cache))
    assert manifest is not None
    assert {d.name for d in manifest.distributions} == {"nativepkg", "helper"}


def test_a_corrupt_bundle_is_refused_before_anything_is_written(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = next((bundle / "wheels").glob("helper-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    root = tmp_path / "root"
    code = main(["apply", "--from", str(bundle), "--root", str(root)])
    assert code == 2
    assert "SHA256SUMS" in capsys.readouterr().err
    assert not root.exists()
