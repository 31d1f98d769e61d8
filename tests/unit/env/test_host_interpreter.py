"""The applied generation belongs to one host interpreter: console scripts and the manifest
name it, and applying for another interpreter rebuilds instead of saying "up to date"."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kvenv.env.apply import noop_fast, plan_apply
from kvenv.env.root import current_state
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot
from tests.support.applyenv import (
    LOCAL_TARGET,
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    local_project,
    locations,
    native_wheel,
    write_project,
)

OTHER = "/opt/other-host/bin/python"


def _for(host: HostSnapshot, executable: str) -> HostSnapshot:
    return attrs.evolve(host, python=attrs.evolve(host.python, executable=executable))


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Project, Locations, HostSnapshot]:
    project = local_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = locations(tmp_path)
    assert apply(project.loaded(), project.lock(), host, where, jobs=2).status == "applied"
    return project, where, host


def test_the_manifest_and_console_scripts_name_the_host_interpreter(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    other = _for(host, OTHER)
    result = apply(project.loaded(), project.lock(), other, where, jobs=2)
    assert result.status == "applied"
    manifest = current_state(where)[1]
    assert manifest is not None and manifest.python == OTHER
    script = Path(manifest.dirs.bin) / "nativecli"
    assert script.read_text().splitlines()[0] == f"#!{OTHER}"


def test_no_op_fast_path_is_keyed_on_the_interpreter(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    assert noop_fast(project.loaded(), where, lambda: host, lambda: None) is not None
    other = _for(host, OTHER)
    assert noop_fast(project.loaded(), where, lambda: other, lambda: None) is None


def test_a_plan_for_another_interpreter_is_not_up_to_date(
    applied: tuple[Project, Locations, HostSnapshot],
) -> None:
    project, where, host = applied
    same = plan_apply(project.loaded(), project.lock(), host, where)
    assert same.up_to_date
    other = plan_apply(project.loaded(), project.lock(), _for(host, OTHER), where)
    assert not other.up_to_date
    assert other.current_generation == same.current_generation
    assert apply(project.loaded(), project.lock(), _for(host, OTHER), where).status == "applied"


def test_host_python_field_resolves_relative_paths_and_keeps_the_digest(tmp_path: Path) -> None:
    from kvenv.model.loading import load_profile

    wheels = tmp_path / "proj" / "wheels"
    project = write_project(
        tmp_path / "proj", native=native_wheel(wheels), overlay=[], target=LOCAL_TARGET
    )
    before = project.loaded()
    assert before.host_python_path is None
    with project.profile_path.open("a") as stream:
        stream.write('[host]\npython = "hostenv/bin/python"\n')
    after = load_profile(str(project.profile_path))
    assert after.host_python_path == project.dir / "hostenv" / "bin" / "python"
    assert after.digest == before.digest  # the lock stays valid when the interpreter moves
