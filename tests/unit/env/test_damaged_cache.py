"""A cached wheel damaged in place (same size and mtime, so the cheap check trusts it) is found
when it fails to unpack: fetched again with a warning naming it, or, offline, refused with an
error naming the file and the fix; nothing is installed from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.env.seal import remove_sealed
from kvenv.errors import FetchError
from kvenv.fetch.cache import ArtifactCache
from kvenv.model.locations import Locations
from tests.support.applyenv import apply, fake_host_site, host_snapshot, standard_project
from tests.support.damage import damage_in_place


def _damage_cached_helper(cache: Path, sha: str) -> Path:
    entry = ArtifactCache(cache).entry(sha)
    wheel = next(p for p in entry.iterdir() if p.suffix == ".whl")
    damage_in_place(wheel)
    return wheel


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, Path]:
    """A project applied once (cache filled), then the store removed and the cached helper
    wheel damaged in place."""
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    first = Locations(tmp_path / "root1", tmp_path / "cache")
    result = apply(project.loaded(), project.lock(), host, first, jobs=2)
    assert result.status == "applied"
    remove_sealed(first.store)
    helper = next(a for a in result.plan.artifacts if a.name == "helper")
    return tmp_path, _damage_cached_helper(first.cache, helper.sha256)


def test_a_damaged_cached_wheel_is_fetched_again_with_a_warning(
    damaged: tuple[Path, Path],
) -> None:
    tmp_path, wheel = damaged
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = Locations(tmp_path / "root2", tmp_path / "cache")
    result = apply(project.loaded(), project.lock(), host, where, jobs=2)
    assert result.status == "applied"
    assert any(str(wheel) in w and "damaged" in w for w in result.warnings), result.warnings


def test_offline_a_damaged_cached_wheel_is_named_with_the_fix(
    damaged: tuple[Path, Path],
) -> None:
    tmp_path, wheel = damaged
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = Locations(tmp_path / "root2", tmp_path / "cache")
    with pytest.raises(FetchError) as info:
        apply(project.loaded(), project.lock(), host, where, jobs=2, offline=True)
    text = info.value.render()
    assert str(wheel) in text and "kvenv apply" in text
    assert not (where.root / "current.json").exists()
