"""A wheel shipping a ``.pth`` file with an executable line (``import os; os.system(...)``,
which ``site`` runs at every interpreter start) is detected when it is unpacked, recorded in
the manifest, and installed into the overlay only when the profile allows that package with
``[[overlay.allow_pth]]`` (issue 12, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.env.manifest import ExecutablePth
from kvenv.env.root import current_state
from kvenv.env.store import GenerationLayout, link_layer, unpack
from kvenv.env.wheelinstall import executable_pth_lines, install_wheel
from kvenv.errors import IntegrityError
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    standard_project,
    write_project,
)
from tests.support.wheels import build_wheel, sha256_of

HOOK = "import os; os.environ.setdefault('EVIL_RAN', '1')"
PTH = f"# a comment\nevil_extra\n{HOOK}\nimport\tsys\n  importlib_is_a_path\n"


def _evil(directory: Path) -> Path:
    return build_wheel(
        directory,
        "evil",
        "1.0",
        files={"evil/__init__.py": "", "evil.pth": PTH, "evil/nested.pth": "import os\n"},
    )


def test_executable_lines_are_the_ones_site_runs() -> None:
    assert executable_pth_lines(PTH) == [HOOK, "import\tsys"]
    assert executable_pth_lines("importlib_is_a_path\n#import os\nimport os\n") == ["import os"]


def test_install_records_executable_pth_lines(tmp_path: Path) -> None:
    dist = install_wheel(_evil(tmp_path / "w"), tmp_path / "site")
    assert dist.executable_pth == (
        ExecutablePth(dist="evil", file="evil.pth", line=HOOK),
        ExecutablePth(dist="evil", file="evil.pth", line="import\tsys"),
    )  # evil/nested.pth is not in a site directory: site never reads it
    plain = install_wheel(build_wheel(tmp_path / "w", "plain", "1.0"), tmp_path / "site")
    assert plain.executable_pth == ()


def test_link_refuses_an_overlay_pth_unless_allowed(tmp_path: Path) -> None:
    wheel = _evil(tmp_path / "w")
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)
    layout = GenerationLayout.beside(tmp_path / "gen1" / "overlay")
    with pytest.raises(IntegrityError) as caught:
        link_layer([entry], layout, python="/usr/bin/python3")
    message = caught.value.message
    assert "evil 1.0" in message and "evil.pth" in message and HOOK in message
    assert caught.value.hint is not None and "[[overlay.allow_pth]]" in caught.value.hint
    assert not (tmp_path / "gen1" / "overlay" / "evil.pth").exists()
    allowed = GenerationLayout.beside(tmp_path / "gen2" / "overlay")
    linked = link_layer([entry], allowed, python="/usr/bin/python3", allow_pth=["Evil"])
    assert linked.dists[0].executable_pth[0].line == HOOK


@pytest.fixture
def env(tmp_path: Path) -> tuple[Project, Locations, Path]:
    project = standard_project(tmp_path / "proj")
    return project, locations(tmp_path), fake_host_site(tmp_path)


def test_apply_refuses_then_records_an_allowed_pth(
    env: tuple[Project, Locations, Path],
) -> None:
    project, where, site = env
    overlay = [*project.overlay, _evil(project.dir / "wheels")]
    hostile = write_project(project.dir, native=project.native, overlay=overlay)

    def run(p: Project) -> None:
        apply(p.loaded(), p.lock(), host_snapshot(site), where, jobs=2)

    with pytest.raises(IntegrityError, match=r"evil 1.0 ships evil.pth"):
        run(hostile)
    assert not where.root.exists() or current_state(where) == (None, None)
    with hostile.profile_path.open("a") as stream:
        stream.write('\n[[overlay.allow_pth]]\nname = "evil"\nreason = "its start-up hook"\n')
    run(hostile)
    _, manifest = current_state(where)
    assert manifest is not None
    assert [(e.dist, e.file, e.line) for e in manifest.executable_pth] == [
        ("helper", "helper_extra.pth", "import os; os.environ['HELPER_PTH'] = 'ran'"),
        ("evil", "evil.pth", HOOK),
        ("evil", "evil.pth", "import\tsys"),
    ]  # the standard project allows the helper's hook (tests.support.applyenv)


def test_plan_reports_pth_lines_of_stored_wheels_and_defers_the_rest(
    env: tuple[Project, Locations, Path],
) -> None:
    from kvenv.env.apply import plan_apply

    project, where, site = env
    evil = _evil(project.dir / "wheels")
    hostile = write_project(project.dir, native=project.native, overlay=[*project.overlay, evil])

    def findings() -> tuple[bool, list[tuple[str, str]]]:
        plan = plan_apply(hostile.loaded(), hostile.lock(), host_snapshot(site), where)
        return plan.compatible, [
            (f.status, f.message) for f in plan.findings if f.check == "overlay-pth"
        ]

    compatible, found = findings()
    assert compatible
    assert [s for s, _ in found] == ["untested"]
    assert "checked at install" in found[0][1] and "evil" in found[0][1]
    unpack(where.store, sha256_of(evil), evil)  # now the store knows its files
    compatible, found = findings()
    assert not compatible
    evil_found = [m for s, m in found if s == "error"]
    assert len(evil_found) == 1 and "evil 1.0" in evil_found[0] and "evil.pth" in evil_found[0]


def test_in_process_activation_runs_only_the_manifests_pth_lines(
    env: tuple[Project, Locations, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kvenv.activate()`` adds paths and executes nothing it finds in the directories: the
    allowed hook the manifest lists runs, a ``.pth`` planted afterwards (an import line and a
    path line) does not (issue 38)."""
    import os
    import sys

    from kvenv.env.activation import activate_in_process

    project, where, site = env
    apply(project.loaded(), project.lock(), host_snapshot(site), where, jobs=2)
    _, manifest = current_state(where)
    assert manifest is not None
    overlay = Path(manifest.dirs.overlay)
    (tmp_path / "planted-dir").mkdir()
    (overlay / "zz-planted.pth").write_text(
        f"{tmp_path / 'planted-dir'}\nimport os; os.environ['PLANTED_RAN'] = '1'\n"
    )
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    os.environ.pop("HELPER_PTH", None)
    path = Path(manifest.dirs.native).parent / "manifest.json"
    assert activate_in_process(manifest=path) is True
    assert os.environ.get("HELPER_PTH") == "ran"  # allowed by the profile, listed: it runs
    assert "PLANTED_RAN" not in os.environ
    assert str(tmp_path / "planted-dir") not in sys.path
    assert sys.path[: len(manifest.activation.pythonpath)] == manifest.activation.pythonpath
