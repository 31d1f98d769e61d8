"""Reset removes only what kvenv owns and refuses dangerous paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.env.reset import execute_reset, path_problem, plan_reset
from kvenv.errors import ConflictError, InputError
from kvenv.model.locations import Locations
from tests.support.applyenv import apply, fake_host_site, host_snapshot, locations, standard_project


def _applied(tmp_path: Path) -> Locations:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    return where


@pytest.mark.parametrize(
    "path",
    ["/", "/root", "/home", "/usr", "/usr/local", "/opt", "/etc", "/var", "/tmp", "/kaggle",
     "/kaggle/input", "/kaggle/working"],
)  # fmt: skip
def test_dangerous_paths_are_refused(path: str, tmp_path: Path) -> None:
    problem = path_problem(Path(path), cwd=tmp_path, environ={})
    assert problem is not None and ("dangerous" in problem or "symlink" in problem)


def test_home_cwd_parents_symlinks_and_git_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert "dangerous" in (path_problem(home, cwd=tmp_path, environ={"HOME": str(home)}) or "")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    assert "current directory" in (path_problem(work, cwd=work, environ={}) or "")
    assert "current directory" in (path_problem(tmp_path / "a", cwd=work, environ={}) or "")
    (tmp_path / "link").symlink_to(work)
    assert "symlink" in (path_problem(tmp_path / "link", cwd=tmp_path, environ={}) or "")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    assert "git" in (path_problem(tmp_path / "repo", cwd=tmp_path, environ={}) or "")
    assert path_problem(Path(""), cwd=tmp_path, environ={}) == "empty path"


def test_unowned_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "someone-elses"
    root.mkdir()
    (root / "data.txt").write_text("precious")
    with pytest.raises(ConflictError, match="cannot prove ownership"):
        plan_reset(Locations(root, tmp_path / "cache"), cwd=tmp_path)
    assert (root / "data.txt").read_text() == "precious"


def test_reset_removes_only_owned_names_and_keeps_cache(tmp_path: Path) -> None:
    where = _applied(tmp_path)
    (where.root / "user-notes.txt").write_text("keep me")
    plan = plan_reset(where, cwd=tmp_path)
    actions = {t.label: t.action for t in plan.targets}
    assert actions["generations"] == "remove" and actions["store"] == "preserve"
    execute_reset(plan, where)
    assert sorted(p.name for p in where.root.iterdir()) == [
        ".kvenv-root",
        ".kvenv.lock",
        "user-notes.txt",
    ]
    assert (where.cache / "store").is_dir()
    again = plan_reset(where, cwd=tmp_path)  # idempotent
    assert all(t.action in ("absent", "preserve") for t in again.targets)


def test_reset_then_apply_restores(tmp_path: Path) -> None:
    where = _applied(tmp_path)
    execute_reset(plan_reset(where, cwd=tmp_path), where)
    assert not where.root.exists()
    where2 = _applied(tmp_path)
    assert (where2.root / "current.json").is_file()


def test_purge_cache(tmp_path: Path) -> None:
    where = _applied(tmp_path)
    execute_reset(plan_reset(where, purge_cache=True, cwd=tmp_path), where)
    assert not (where.cache / "store").exists()


def test_cli_requires_yes_and_dry_run_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    where = _applied(tmp_path)
    monkeypatch.chdir(tmp_path)
    profile = str(tmp_path / "proj" / "profiles" / "t.toml")
    common = [profile, "--root", str(where.root), "--cache", str(where.cache)]
    assert main(["reset", *common]) == 2
    assert "requires --yes" in capsys.readouterr().err
    assert main(["reset", *common, "--dry-run", "--json"]) == 0
    assert (where.root / "current.json").exists()
    assert main(["reset", *common, "--yes"]) == 0
    assert not where.root.exists()
    assert "cache preserved" in capsys.readouterr().out


def test_reset_refuses_a_symlinked_root(tmp_path: Path) -> None:
    where = _applied(tmp_path)
    alias = tmp_path / "alias"
    os.symlink(where.root, alias)
    with pytest.raises(InputError, match="symlink"):
        plan_reset(Locations(alias, where.cache), cwd=tmp_path)
