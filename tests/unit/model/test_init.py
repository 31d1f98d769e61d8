"""The ``kvenv init`` transaction: checks first, the host probed only then, every file created
exclusively, nothing left behind when a file appears under it."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kvenv.errors import InputError, ProfileError, UsageError
from kvenv.model.init import InitResult, init_profile, render_profile
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import HostSnapshot, read_snapshot
from tests.support.paths import REPO

KAGGLE_HOST = REPO / "profiles" / "kaggle-t4x2-cu128.host.json"


class Probe:
    """A host callable that counts its calls (and may act before answering)."""

    def __init__(self, before: Path | None = None) -> None:
        self.calls = 0
        self.before = before

    def __call__(self) -> HostSnapshot:
        self.calls += 1
        if self.before is not None:
            self.before.write_text("# written meanwhile\n")
        return read_snapshot(KAGGLE_HOST)


def test_a_plain_profile(tmp_path: Path) -> None:
    result = init_profile("team", tmp_path, today="2026-01-02")
    assert result == InitResult(tmp_path / "profiles" / "team.toml", None)
    assert "started with `kvenv init` on 2026-01-02" in result.profile.read_text()
    assert load_profile(str(result.profile), cwd=tmp_path).profile.name == "team"
    assert [p.name for p in (tmp_path / "profiles").iterdir()] == ["team.toml"]


def test_from_a_host_writes_the_snapshot_beside_the_profile(tmp_path: Path) -> None:
    probe = Probe()
    result = init_profile("here", tmp_path, host=probe)
    assert probe.calls == 1
    assert result.snapshot == tmp_path / "profiles" / "here.host.json"
    assert read_snapshot(result.snapshot) == read_snapshot(KAGGLE_HOST)
    loaded = load_profile(str(result.profile), cwd=tmp_path)
    assert loaded.snapshot_path == result.snapshot
    assert loaded.profile.target is not None and loaded.profile.target.abi == "cp312"


def test_every_check_runs_before_the_host_is_probed(tmp_path: Path) -> None:
    probe = Probe()
    with pytest.raises(UsageError, match="invalid profile name"):
        init_profile("Bad Name", tmp_path, host=probe)
    with pytest.raises(InputError, match="project directory not found"):
        init_profile("x", tmp_path / "nowhere", host=probe)
    with pytest.raises(ProfileError, match="no profile named 'no-such'"):
        init_profile("x", tmp_path, extends="no-such", host=probe)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "x.host.json").write_text("{}")
    with pytest.raises(InputError, match="refusing to overwrite") as info:
        init_profile("x", tmp_path, host=probe)
    assert info.value.hint == "kvenv init never overwrites; pick another NAME or remove the file"
    assert probe.calls == 0
    assert [p.name for p in (tmp_path / "profiles").iterdir()] == ["x.host.json"]


def test_a_profile_that_appears_meanwhile_is_kept_and_the_snapshot_removed(
    tmp_path: Path,
) -> None:
    (tmp_path / "profiles").mkdir()
    path = tmp_path / "profiles" / "race.toml"
    with pytest.raises(InputError, match=f"refusing to overwrite {path}"):
        init_profile("race", tmp_path, host=Probe(before=path))
    assert path.read_text() == "# written meanwhile\n"
    assert [p.name for p in (tmp_path / "profiles").iterdir()] == ["race.toml"]


def test_a_snapshot_that_appears_meanwhile_is_kept(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    snap = tmp_path / "profiles" / "race.host.json"
    with pytest.raises(InputError, match=f"refusing to overwrite {snap}"):
        init_profile("race", tmp_path, host=Probe(before=snap))
    assert snap.read_text() == "# written meanwhile\n"
    assert [p.name for p in (tmp_path / "profiles").iterdir()] == ["race.host.json"]


def test_a_windows_host_is_described_as_windows() -> None:
    host = read_snapshot(KAGGLE_HOST)
    windows = attrs.evolve(host, platform=attrs.evolve(host.platform, os="win32", libc=None))
    text = render_profile("win", host=windows)
    assert 'os = "windows"' in text and "glibc" not in text
