"""Reset removes only what kvenv owns and refuses dangerous paths."""

from __future__ import annotations

import json
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
    assert actions["store"] == "preserve" and actions["user-notes.txt"] == "keep"
    assert [t.action for t in plan.targets if t.label.startswith("generation ")] == ["remove"]
    execute_reset(plan, where)
    assert sorted(p.name for p in where.root.iterdir()) == [
        ".kvenv-root",
        ".kvenv.lock",
        "user-notes.txt",
    ]
    assert (where.cache / "store").is_dir()
    again = plan_reset(where, cwd=tmp_path)  # idempotent
    assert all(t.action in ("absent", "preserve", "keep") for t in again.targets)


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


def _plant(where: Locations) -> list[Path]:
    """A nested runtime root inside the current generation, a user's files beside kvenv's
    names (in the root and in ``generations/``): every file of theirs (the nested root's many).
    Also a file added inside the generation, which goes with it (as ``apply --repair``)."""
    generation = next((where.root / "generations").iterdir())
    nested = generation / "native" / "newroot"
    (nested / "generations" / "20260101T000000-abcdef" / "overlay" / "pkg").mkdir(parents=True)
    (nested / ".kvenv-root").write_text('{"schema": 1}')
    for index in range(5):
        (nested / "generations" / "20260101T000000-abcdef" / "overlay" / "pkg" / f"m{index}.py")\
            .write_text(f"x = {index}\n")  # fmt: skip
    (generation / "overlay" / "sitecustomize.py").write_text("planted")
    (where.root / "user-notes.txt").write_text("keep me")
    (where.root / "generations" / "my-data").mkdir()
    (where.root / "generations" / "my-data" / "d.txt").write_text("mine")
    return sorted(
        [p for p in nested.rglob("*") if p.is_file()]
        + [where.root / "generations" / "my-data" / "d.txt", where.root / "user-notes.txt"]
    )


def test_reset_keeps_and_names_a_nested_root_and_users_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    where = _applied(tmp_path)
    planted = _plant(where)
    contents = {p: p.read_bytes() for p in planted}
    generation = next((where.root / "generations").iterdir())
    monkeypatch.chdir(tmp_path)
    profile = str(tmp_path / "proj" / "profiles" / "t.toml")
    common = [profile, "--root", str(where.root), "--cache", str(where.cache)]
    nested = str(generation / "native" / "newroot")
    added = str(where.root / "generations" / "my-data")
    user = str(where.root / "user-notes.txt")

    assert main(["reset", *common, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert f"remove   {generation}" in text
    for path in (nested, added, user):
        assert f"keep     {path}" in text
    assert main(["reset", *common, "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(data["kept"]) == sorted([nested, added, user])
    assert {t["path"] for t in data["targets"] if t["action"] == "remove"} >= {
        str(generation),
        str(where.root / "current.json"),
    }

    assert main(["reset", *common, "--yes"]) == 0
    text = capsys.readouterr().out
    for path in (nested, added, user):
        assert f"kept {path}" in text
    assert f"{where.root} stays" in text
    assert {p: p.read_bytes() for p in planted if p.is_file()} == contents  # every file survives
    # kvenv's own files went: no pointer, shims, manifest or installed module is left
    assert not (where.root / "current.json").exists()
    assert not list(where.root.glob("activate.*"))
    assert not (generation / "manifest.json").exists()
    assert not (generation / "overlay" / "sitecustomize.py").exists()
    left = {p for p in where.root.rglob("*") if p.is_file()}
    assert left - set(planted) == {where.root / ".kvenv-root", where.root / ".kvenv.lock"}
    # a second reset keeps the same and removes nothing more
    assert main(["reset", *common, "--yes"]) == 0
    assert {p: p.read_bytes() for p in planted} == contents


def test_reset_through_a_symlinked_root_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    where = _applied(tmp_path)
    alias = tmp_path / "alias"
    os.symlink(where.root, alias)
    monkeypatch.chdir(tmp_path)
    profile = str(tmp_path / "proj" / "profiles" / "t.toml")
    assert main(["reset", profile, "--root", str(alias), "--cache", str(where.cache), "--yes"]) == 2
    message = capsys.readouterr().err
    assert "symlink" in message and str(where.root) in message
    assert (where.root / "current.json").is_file()
    linked_parent = tmp_path / "parent-link"
    os.symlink(where.root.parent, linked_parent)
    assert main(
        ["reset", profile, "--root", str(linked_parent / where.root.name), "--cache",
         str(where.cache), "--yes"]
    ) == 2  # fmt: skip
    assert (where.root / "current.json").is_file()


def test_reset_with_nothing_applied_names_no_absent_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    standard_project(tmp_path / "proj")
    monkeypatch.chdir(tmp_path)
    profile = str(tmp_path / "proj" / "profiles" / "t.toml")
    common = [profile, "--root", str(tmp_path / "none"), "--cache", str(tmp_path / "no-cache")]
    assert main(["reset", *common, "--dry-run"]) == 0
    assert "preserve" not in capsys.readouterr().out
    assert main(["reset", *common, "--yes"]) == 0
    text = capsys.readouterr().out
    assert "cache preserved" not in text and "nothing is applied" in text
