"""``apply`` executes the Plan it is given: its steps, in its order, with its artifacts. A test
edits a plan and sees apply follow the edit (or refuse a plan it cannot execute, changing
nothing)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kvenv.env.apply import ApplyOptions, apply, plan_apply
from kvenv.env.root import POINTER_NAME, current_state, list_generations, read_pointer
from kvenv.errors import InputError
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot
from kvenv.plan.make import STEP_ORDER, Plan, Step
from tests.support.applyenv import (
    Project,
    fake_host_site,
    host_snapshot,
    locations,
    standard_project,
)


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Project, Locations, HostSnapshot, Plan]:
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = locations(tmp_path)
    plan = plan_apply(project.loaded(), project.lock(), host, where)
    return project, where, host, plan


def _without(plan: Plan, *names: str) -> Plan:
    return attrs.evolve(plan, steps=[s for s in plan.steps if s.name not in names])


def test_a_fresh_plan_lists_every_step_in_order(
    planned: tuple[Project, Locations, HostSnapshot, Plan],
) -> None:
    plan = planned[3]
    assert tuple(s.name for s in plan.steps) == STEP_ORDER
    assert plan.inputs.locations == planned[1]
    assert all(a.artifact.sha256 == a.sha256 for a in plan.artifacts)


def test_apply_follows_a_plan_without_write_shims(
    planned: tuple[Project, Locations, HostSnapshot, Plan],
) -> None:
    _, where, _, plan = planned
    result = apply(_without(plan, "write-shims"), ApplyOptions(jobs=2))
    assert result.status == "applied"
    pointer = read_pointer(where.root)
    assert pointer is not None and pointer.generation == result.generation
    assert not list(where.root.glob("activate.*"))  # the step that was taken out did not run


def test_apply_follows_a_plan_that_stops_before_the_switch(
    planned: tuple[Project, Locations, HostSnapshot, Plan],
) -> None:
    _, where, _, plan = planned
    result = apply(_without(plan, "switch", "write-shims"), ApplyOptions(jobs=2))
    assert result.generation is not None
    assert (where.generations / result.generation / "manifest.json").is_file()
    assert not (where.root / POINTER_NAME).exists()  # built, never made current
    assert current_state(where) == (None, None)


def test_apply_installs_only_the_plans_artifacts(
    planned: tuple[Project, Locations, HostSnapshot, Plan],
) -> None:
    _, where, _, plan = planned
    native_only = attrs.evolve(plan, artifacts=[a for a in plan.artifacts if a.role == "native"])
    result = apply(native_only, ApplyOptions(jobs=2))
    _, manifest = current_state(where)
    assert manifest is not None and manifest.generation == result.generation
    assert {d.layer for d in manifest.distributions} == {"native"}


@pytest.mark.parametrize(
    ("steps", "needs"),
    [
        (("fetch", "verify", "install-native", "install-overlay", "switch"), "write-manifest"),
        (("verify", "fetch"), "fetch"),
        (("fetch", "verify", "write-shims"), "switch"),
    ],
)
def test_a_plan_whose_steps_cannot_run_is_refused_before_anything_is_written(
    planned: tuple[Project, Locations, HostSnapshot, Plan], steps: tuple[str, ...], needs: str
) -> None:
    _, where, _, plan = planned
    by_name: dict[str, Step] = {s.name: s for s in plan.steps}
    edited = attrs.evolve(plan, steps=[by_name[name] for name in steps])
    with pytest.raises(InputError, match=f"needs '{needs}'"):
        apply(edited, ApplyOptions(jobs=2))
    assert not where.root.exists()
    assert list_generations(where) == []


def test_a_plan_made_without_a_root_cannot_be_applied(
    planned: tuple[Project, Locations, HostSnapshot, Plan],
) -> None:
    _, where, _, plan = planned
    rootless = attrs.evolve(plan, inputs=attrs.evolve(plan.inputs, locations=None))
    with pytest.raises(InputError, match="without a runtime root"):
        apply(rootless, ApplyOptions(jobs=2))
    assert not where.root.exists()
