"""The no-op fast path of ``kvenv apply``: taken only when the applied generation certainly
matches the inputs; any changed input, missing directory or misfit host defeats it."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs
import pytest

from kvenv.env.apply import noop_fast
from kvenv.env.root import current_state
from kvenv.errors import ConflictError
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    local_project,
    locations,
)


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Project, Locations, HostSnapshot]:
    project = local_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = locations(tmp_path)
    result = apply(project.loaded(), project.lock(), host, where, jobs=2)
    assert result.status == "applied"
    return project, where, host


def _fast(project: Project, where: Locations, host: HostSnapshot) -> tuple[str, str] | None:
    return noop_fast(project.loaded(), where, lambda: host, lambda: None)


def test_taken_when_nothing_changed(applied: tuple[Project, Locations, HostSnapshot]) -> None:
    project, where, host = applied
    found = _fast(project, where, host)
    assert found is not None
    generation, manifest = found
    assert Path(manifest) == where.generations / generation / "manifest.json"


def test_changed_lock_byte_defeats_it(applied: tuple[Project, Locations, HostSnapshot]) -> None:
    project, where, host = applied
    with project.lock_path.open("ab") as handle:
        handle.write(b"\n")
    assert _fast(project, where, host) is None
    # the full path agrees: a changed lock is a new generation
    result = apply(project.loaded(), project.lock(), host, where, jobs=2)
    assert result.status == "applied"
    assert _fast(project, where, host) is not None


def test_changed_profile_field_defeats_it(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    text = project.profile_path.read_text()
    project.profile_path.write_text(text.replace("[runtime.env]\n", '[runtime.env]\nX = "1"\n'))
    assert _fast(project, where, host) is None


def test_missing_generation_dir_defeats_it(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    found = _fast(project, where, host)
    assert found is not None
    _, manifest = current_state(where)
    assert manifest is not None
    shutil.rmtree(manifest.dirs.overlay)
    assert _fast(project, where, host) is None


def test_stray_shim_or_generation_or_busy_lock_defeats_it(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    (where.root / "activate.fish").write_text("# edited\n")
    assert _fast(project, where, host) is None
    apply(project.loaded(), project.lock(), host, where, jobs=2)  # rewrites the shims
    assert _fast(project, where, host) is not None
    stray = where.generations / "20200101T000000-abcdef"
    stray.mkdir()
    assert _fast(project, where, host) is None
    stray.rmdir()
    owner = where.root / ".kvenv.lock.owner"
    owner.write_text("pid 1 on elsewhere\n")
    assert _fast(project, where, host) is None


def test_misfit_host_defeats_it(applied: tuple[Project, Locations, HostSnapshot]) -> None:
    project, where, host = applied
    misfit = attrs.evolve(host, python=attrs.evolve(host.python, implementation="pypy"))
    assert _fast(project, where, misfit) is None
    with pytest.raises(ConflictError):  # the full path refuses it
        apply(project.loaded(), project.lock(), misfit, where, jobs=2)
