"""A runtime root records the profile that owns it: its name (and, for messages, the file it
was read from). Another profile (another name) applied there is refused (exit 3), and activate,
verify and status of a profile whose root belongs to another say so. The same name reached
through another file is the same owner; a changed profile of that name makes a new generation.
A root from an older kvenv (a marker without an owner, or kvenv 0.1.0's name and file) is
adopted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvenv.env.root import read_owner
from tests.support.applyenv import Project, standard_project
from tests.support.hardening import CliResult, run_cli


def _family(tmp_path: Path) -> tuple[Project, Path, Path]:
    """Profile ``t`` with ``[paths] root``, and ``child`` extending it (inheriting the root)."""
    project = standard_project(tmp_path / "proj")
    root = tmp_path / "shared-root"
    text = project.profile_path.read_text()
    project.profile_path.write_text(
        text.replace(
            "[native]", f'[paths]\nroot = "{root}"\ncache = "{tmp_path / "c"}"\n[native]', 1
        )
    )
    child = project.dir / "profiles" / "child.toml"
    child.write_text('schema = 1\nname = "child"\nextends = "t"\n')
    lock = project.lock_path.read_text().replace('profile = "t"', 'profile = "child"')
    (project.dir / "locks" / "pylock.child.toml").write_text(lock)
    return project, child, root


def _run(*args: str | Path) -> CliResult:
    return run_cli([str(a) for a in args])


def test_applying_another_profile_on_an_owned_root_is_refused(tmp_path: Path) -> None:
    project, child, root = _family(tmp_path)
    assert _run("apply", child).code == 0
    owner = read_owner(root)
    assert owner is not None and owner.name == "child" and owner.file == str(child.resolve())
    pointer = (root / "current.json").read_bytes()
    result = _run("apply", project.profile_path)
    assert result.code == 3, result.text
    assert "'child'" in result.err and "'t'" in result.err and "--root" in result.err, result.err
    assert (root / "current.json").read_bytes() == pointer, "nothing changed"


def test_activate_verify_status_of_a_profile_whose_root_is_another_s(tmp_path: Path) -> None:
    project, child, _ = _family(tmp_path)
    assert _run("apply", child).code == 0
    for command in ("activate", "verify"):
        result = _run(command, project.profile_path)
        assert result.code == 3, (command, result.text)
        assert "belongs to profile 'child'" in result.err, result.err
        assert "PYTHONPATH" not in result.out
    status = _run("status", project.profile_path, "--json")
    assert status.code == 0, status.text
    data = json.loads(status.out)
    assert data["owner"]["name"] == "child" and data["owned"] is False
    assert data["applied"] is False
    text = _run("status", project.profile_path)
    assert "belongs to profile 'child'" in text.out, text.out
    assert _run("activate", child).code == 0
    assert _run("verify", child).code == 0


def test_one_name_read_from_two_files_is_one_owner(tmp_path: Path) -> None:
    """The same profile reached through another file (a copy, a bundle's copy, the built-in
    beside its project file) owns the root; a changed one of that name makes a new
    generation there, not a refusal."""
    import shutil

    project, _, root = _family(tmp_path)
    copy = shutil.copytree(project.dir, tmp_path / "elsewhere")  # its lock and wheels too
    twin = copy / "profiles" / "t.toml"  # also name = "t", another file
    assert _run("apply", project.profile_path).code == 0
    first = json.loads((root / "current.json").read_text())["generation"]
    for command in ("activate", "verify", "status", "list", "generations"):
        result = _run(command, twin)
        assert result.code == 0, (command, result.text)
        assert "belongs to" not in result.text, (command, result.text)
    twin.write_text(twin.read_text() + 'KVENV_TWIN = "1"\n')  # in [runtime.env], the last table
    result = _run("apply", twin)
    assert result.code == 0, result.text
    current = json.loads((root / "current.json").read_text())
    assert current["generation"] != first and current["previous"] == first
    owner = read_owner(root)
    assert owner is not None and owner.name == "t"


def test_two_names_in_one_root_are_refused_naming_both_and_a_fix(tmp_path: Path) -> None:
    project, child, root = _family(tmp_path)
    assert _run("apply", project.profile_path).code == 0
    for command in ("apply", "activate", "run"):
        argv = [command, child] + (["--", "true"] if command == "run" else [])
        result = _run(*argv)
        assert result.code == 3, (command, result.text)
        assert str(project.profile_path.resolve()) in result.err, result.err  # the owner's file
        assert str(child.resolve()) in result.err, result.err  # and the one typed
        fix = f"kvenv reset {project.profile_path.resolve()} --root {root} --yes"
        assert fix in result.err, result.err
        assert "or use 'child'" not in result.err and "or use 't'" not in result.err
    # the fix runs as printed: the owner's runtime removed, the other profile applies
    assert _run("reset", project.profile_path.resolve(), "--root", root, "--yes").code == 0
    assert _run("apply", child).code == 0
    owner = read_owner(root)
    assert owner is not None and owner.name == "child"


def test_a_root_of_kvenv_0_1_0_naming_another_file_is_adopted(tmp_path: Path) -> None:
    """kvenv 0.1.0 recorded the owner's name and file: a root it made for the built-in (file
    None) or for another path of the same profile is used without a reset."""
    project, _, root = _family(tmp_path)
    assert _run("apply", project.profile_path).code == 0
    marker = root / ".kvenv-root"
    for file in (None, "/gone/profiles/t.toml"):
        data = json.loads(marker.read_text())
        data["owner"] = {"name": "t", "file": file}
        data["kvenv"] = "0.1.0"
        marker.write_text(json.dumps(data))
        for command in ("activate", "verify", "apply"):
            result = _run(command, project.profile_path)
            assert result.code == 0, (file, command, result.text)


def test_a_root_from_an_older_kvenv_is_adopted(tmp_path: Path) -> None:
    project, _, root = _family(tmp_path)
    assert _run("apply", project.profile_path).code == 0
    marker = root / ".kvenv-root"
    data = json.loads(marker.read_text())
    data.pop("owner")
    marker.write_text(json.dumps(data))
    assert read_owner(root) is None
    assert _run("activate", project.profile_path).code == 0  # no owner yet: not refused
    assert _run("apply", project.profile_path).code == 0
    owner = read_owner(root)
    assert owner is not None and owner.name == "t"


def test_plan_and_doctor_of_a_profile_whose_root_is_another_s_see_nothing_applied(
    tmp_path: Path,
) -> None:
    from kvenv.env.applied import applied_state
    from kvenv.model.loading import load_profile

    project, child, _ = _family(tmp_path)
    assert _run("apply", child).code == 0
    plan = _run("plan", project.profile_path, "--json")
    assert json.loads(plan.out)["current_generation"] is None, plan.out
    state = applied_state(load_profile(str(project.profile_path)))
    assert state.overlay is None and "belongs to profile 'child'" in state.note, state.note
    assert applied_state(load_profile(str(child))).overlay is not None


def test_two_profiles_racing_for_one_new_root_leave_one_owner(tmp_path: Path) -> None:
    """Ownership is settled under the root lock: one apply wins, the other is refused (exit 3),
    and the owner recorded is the profile whose generation is current."""
    import subprocess

    from tests.support.hardening import kvenv_argv, kvenv_env

    project, child, root = _family(tmp_path)
    procs = [
        subprocess.Popen(
            kvenv_argv(["apply", str(path)]),
            env=kvenv_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in (project.profile_path, child)
    ]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 3], [p.communicate() for p in procs]
    owner = read_owner(root)
    pointer = json.loads((root / "current.json").read_text())
    manifest = root / "generations" / pointer["generation"] / "manifest.json"
    assert owner is not None and json.loads(manifest.read_text())["profile"]["name"] == owner.name


def test_a_claim_never_replaces_an_owner_recorded_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``claim_root`` looks for the marker, then writes one: another apply may have claimed
    the root and recorded its owner (under the root lock) in between. The claim must leave
    that marker as it is (before, it replaced it with an unowned one, and the slower apply
    then took over a root another profile had just applied into)."""
    import kvenv.env.root as root_module
    from kvenv.env.root import RootOwner, claim_root, take_ownership

    root = tmp_path / "root"
    claim_root(root)
    take_ownership(root, RootOwner("t", None))
    marker = (root / ".kvenv-root").read_bytes()
    monkeypatch.setattr(root_module, "is_owned", lambda _: False)  # looked before that
    claim_root(root)
    assert (root / ".kvenv-root").read_bytes() == marker
    owner = read_owner(root)
    assert owner is not None and owner.name == "t"
