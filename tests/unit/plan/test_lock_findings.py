"""The lock's ``[tool.kvenv]`` held against the profile by ``kvenv plan`` and ``kvenv apply``
(protected set, native identity, digests), and ``kvenv lock --check`` on a profile without
``[target]`` (everything that needs no target is checked; the rest is reported as skipped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.applyenv import Project, locations, restamp_lock, standard_project
from tests.support.hardening import run_cli, tree_state
from tests.support.wheels import sha256_of


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    project = standard_project(tmp_path / "proj")
    # a current lock: the digest of this profile as written (the profile has no snapshot)
    _sub(project.lock_path, '"sha256:tests"', f'"{project.loaded().digest}"')
    return project


def _findings(project: Project, *extra: str) -> tuple[int, dict[str, tuple[str, str]]]:
    result = run_cli(["plan", str(project.profile_path), "--json", *extra])
    assert "Traceback" not in result.text
    data = json.loads(result.out)
    found = {f["check"]: (f["status"], f["message"]) for f in data["findings"]}
    return result.code, {k: v for k, v in found.items() if k.startswith("lock ")}


def test_a_matching_lock_passes(project: Project) -> None:
    code, found = _findings(project)
    assert code == 0
    assert {k: v[0] for k, v in found.items()} == {
        "lock protected": "pass",
        "lock native": "pass",
        "lock current": "pass",
    }


def test_a_lock_for_another_native_wheel_is_an_error(project: Project, tmp_path: Path) -> None:
    digest = sha256_of(project.native)
    text = project.lock_path.read_text()
    cut = text.index("[tool.kvenv.native]")
    project.lock_path.write_text(text[:cut] + text[cut:].replace(digest, "b" * 64))
    code, found = _findings(project)
    assert code == 3
    status, message = found["lock native"]
    assert status == "error" and "another native wheel" in message and "sha256" in message
    before = tree_state(tmp_path / "proj")
    where = locations(tmp_path)
    args = ["apply", str(project.profile_path), "--root", str(where.root)]
    result = run_cli([*args, "--cache", str(where.cache)])
    assert result.code == 3, result.text
    assert "the lock does not match profile t" in result.err
    assert "another native wheel" in result.err and "kvenv lock" in result.err
    assert tree_state(tmp_path / "proj") == before
    assert not where.root.exists()


def test_a_lock_that_protects_less_is_an_error(project: Project) -> None:
    _sub(project.lock_path, '"torch", "torchvision", "torchaudio"', '"torch", "torchvision"')
    code, found = _findings(project)
    assert code == 3
    status, message = found["lock protected"]
    assert status == "error" and "torchaudio" in message


def test_a_stale_lock_warns_and_fails_under_strict(project: Project) -> None:
    _sub(project.profile_path, "DEMO_VAR =", 'OTHER = "x"\nDEMO_VAR =')
    code, found = _findings(project)
    assert code == 0
    status, message = found["lock current"]
    assert status == "warning" and "lock is stale" in message
    code, found = _findings(project, "--strict")
    assert code == 3 and found["lock current"][0] == "error"


def test_lock_check_without_target_checks_the_rest(project: Project) -> None:
    restamp_lock(project.lock_path)  # as kvenv writes a lock: lock --check holds its digest
    result = run_cli(["lock", str(project.profile_path), "--check"])
    assert result.code == 0, result.text
    assert "skipped:" in result.err and "has no [target]" in result.err
    result = run_cli(["lock", str(project.profile_path), "--check", "--json"])
    report = json.loads(result.out)
    assert result.code == 0 and report["ok"] and len(report["skipped"]) == 1

    size = f"size = {project.overlay[0].stat().st_size}\n"
    _sub(project.lock_path, size, "")  # (also an edit by hand: not what this test looks at)
    protect = '[host]\nprotected = ["torch", "torchvision", "torchaudio", "helper"]\n[native]'
    _sub(project.profile_path, "[native]", protect)
    result = run_cli(["lock", str(project.profile_path), "--check", "--json"])
    report = json.loads(result.out)
    assert result.code == 1
    paths = {p["path"]: p["message"] for p in report["problems"]}
    assert "protected" in paths["$.packages[0].name"]
    assert "no size" in paths["$.packages[0].wheels[0].size"]

    _sub(project.profile_path, "DEMO_VAR =", 'OTHER = "x"\nDEMO_VAR =')
    result = run_cli(["lock", str(project.profile_path), "--check", "--json"])
    assert result.code == 1 and json.loads(result.out)["stale"]
