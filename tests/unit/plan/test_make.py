"""``make_plan`` is pure: findings, tag check, steps with what is done, shadows, up_to_date;
and the ``kvenv plan`` command over it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kvenv.cli import main, schemas
from kvenv.env.root import current_state
from kvenv.model.snapshot import dumps_snapshot
from kvenv.plan.make import make_plan, plan_to_dict, target_from_host
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    helper_wheel,
    host_snapshot,
    locations,
    standard_project,
    write_project,
)
from tests.support.jsonschema_subset import validate
from tests.support.wheels import build_wheel


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return standard_project(tmp_path / "proj")


def test_fresh_plan(project: Project, tmp_path: Path) -> None:
    host = host_snapshot(fake_host_site(tmp_path))
    plan = make_plan(project.loaded(), project.lock(), host, None)
    assert plan.compatible and not plan.up_to_date
    assert [s.name for s in plan.steps] == [
        "fetch", "verify", "install-native", "install-overlay",
        "write-manifest", "switch", "write-shims",
    ]  # fmt: skip
    assert not any(s.done for s in plan.steps)
    assert [(a.name, a.role) for a in plan.artifacts] == [
        ("nativepkg", "native"),
        ("helper", "overlay"),
    ]
    assert [(s.name, s.host_version, s.overlay_version) for s in plan.shadows] == [
        ("helper", "1.0", "2.0")
    ]
    assert "(the host)" in plan.target
    assert validate(plan_to_dict(plan), schemas.generate("plan")) == []


def test_the_same_version_on_the_host_is_no_shadow(project: Project, tmp_path: Path) -> None:
    """An overlay wheel at the host's own version (``jmespath 1.1.0 -> 1.1.0``) is not listed
    as a shadow; the plan's text says what it is."""
    import attrs

    from kvenv.cli.apply import _plan_lines
    from kvenv.model.snapshot import Distribution

    host = host_snapshot(fake_host_site(tmp_path))
    same = [attrs.evolve(d, version="2.0") if d.name == "helper" else d for d in host.distributions]
    assert any(isinstance(d, Distribution) for d in same)
    plan = make_plan(project.loaded(), project.lock(), attrs.evolve(host, distributions=same), None)
    assert plan.shadows == []
    lines = _plan_lines(plan)
    assert "overlay shadows these host packages:" not in lines
    assert "overlay also carries, at the host's own version: helper 2.0" in lines


def test_cached_and_unpacked_are_reported(project: Project, tmp_path: Path) -> None:
    host = host_snapshot(fake_host_site(tmp_path))
    shas = frozenset(
        a.sha256 for a in make_plan(project.loaded(), project.lock(), host, None).artifacts
    )
    plan = make_plan(project.loaded(), project.lock(), host, None, cached=shas, unpacked=shas)
    assert plan.steps[0].done
    assert "0 to unpack" in plan.steps[2].detail


def test_up_to_date_after_apply_and_not_after_a_change(project: Project, tmp_path: Path) -> None:
    site = fake_host_site(tmp_path)
    where = locations(tmp_path)
    apply(project.loaded(), project.lock(), host_snapshot(site), where)
    _, manifest = current_state(where)
    plan = make_plan(project.loaded(), project.lock(), host_snapshot(site), manifest)
    assert plan.up_to_date and all(s.done for s in plan.steps)
    changed = write_project(
        project.dir, native=project.native, overlay=[helper_wheel(project.dir / "w2", "2.5")]
    )
    plan = make_plan(changed.loaded(), changed.lock(), host_snapshot(site), manifest)
    assert not plan.up_to_date


def test_abi_mismatch_is_always_an_error(tmp_path: Path) -> None:
    target = '[target]\npython = "3.9"\nabi = "cp39"\n'
    wheels = tmp_path / "w"
    native = build_wheel(wheels, "nativepkg", "1.0", tag="cp39-cp39-linux_x86_64")
    project = write_project(tmp_path, native=native, overlay=[], target=target)
    plan = make_plan(project.loaded(), None, host_snapshot(fake_host_site(tmp_path)), None)
    assert not plan.compatible
    assert {f.check for f in plan.errors} >= {"Python ABI"}


def test_native_tags_must_fit_the_target(tmp_path: Path) -> None:
    native = build_wheel(tmp_path / "w", "nativepkg", "1.0", tag="cp27-cp27mu-linux_x86_64")
    project = write_project(tmp_path, native=native, overlay=[])
    plan = make_plan(project.loaded(), None, host_snapshot(fake_host_site(tmp_path)), None)
    assert [f.check for f in plan.errors] == ["native wheel tags"]


def test_target_from_host() -> None:
    host = host_snapshot(Path("/nowhere"))
    target = target_from_host(host)
    assert target.abi == f"cp3{sys.version_info.minor}" and target.os == "linux"


def test_cli_plan_json_with_host_snapshot(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "host.json"
    snap.write_text(dumps_snapshot(host_snapshot(fake_host_site(tmp_path))))
    where = locations(tmp_path)
    argv = ["plan", str(project.profile_path), "--json", "--host", str(snap)]
    assert main([*argv, "--root", str(where.root), "--cache", str(where.cache)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == 1 and data["compatible"] is True
    assert not where.root.exists()  # plan writes nothing
    assert (
        main(
            [*argv[:2], "--host", str(snap), "--root", str(where.root), "--cache", str(where.cache)]
        )
        == 0
    )
    assert "[todo] fetch" in capsys.readouterr().out
