"""Empty and unusable runtime roots and caches: refused with a message naming the path and
where it came from (``--root``, ``$KVENV_ROOT``, the profile's ``[paths]``); nothing deleted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kvenv.errors import UsageError
from kvenv.model.locations import default_cache_dir, resolve_locations
from tests.support.applyenv import apply, fake_host_site, host_snapshot, locations, standard_project
from tests.support.hardening import run_cli


def _profile_path(tmp_path: Path) -> Path:
    return standard_project(tmp_path / "proj").profile_path


def test_empty_root_flag_is_refused_and_nothing_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    monkeypatch.setenv("KVENV_ROOT", str(where.root))  # the fallback an empty flag used to take
    result = run_cli(["reset", str(project.profile_path), "--root", "", "--yes"])
    assert result.code == 2, result.text
    assert "--root" in result.err and "empty" in result.err
    assert "Traceback" not in result.text
    assert (where.root / "current.json").is_file(), "nothing may be deleted"


@pytest.mark.parametrize("variable", ["KVENV_ROOT", "KVENV_CACHE_DIR"])
def test_empty_environment_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    profile = _profile_path(tmp_path)
    monkeypatch.setenv(variable, "")
    for command in ("status", "reset", "plan"):
        result = run_cli([command, str(profile)])
        assert result.code == 2, (command, result.text)
        assert f"${variable}" in result.err and "empty" in result.err, result.err


def test_empty_cache_flag_is_refused(tmp_path: Path) -> None:
    profile = _profile_path(tmp_path)
    result = run_cli(["status", str(profile), "--root", str(tmp_path / "r"), "--cache", ""])
    assert result.code == 2, result.text
    assert "--cache" in result.err and "empty" in result.err


def test_default_cache_dir_refuses_empty_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVENV_CACHE_DIR", "   ")
    with pytest.raises(UsageError, match=r"\$KVENV_CACHE_DIR"):
        default_cache_dir()


@pytest.mark.parametrize("field", ["root", "cache"])
def test_empty_profile_paths_are_refused(tmp_path: Path, field: str) -> None:
    profile = _profile_path(tmp_path)
    text = profile.read_text()
    profile.write_text(text.replace("[native]", f'[paths]\n{field} = ""\n[native]', 1))
    result = run_cli(["status", str(profile)])
    assert result.code == 2, result.text
    assert f"$.paths.{field}" in result.err


def test_locations_record_where_paths_came_from(tmp_path: Path) -> None:
    loaded = standard_project(tmp_path / "proj").loaded()
    env = {"KVENV_ROOT": str(tmp_path / "r"), "XDG_CACHE_HOME": str(tmp_path / "c")}
    where = resolve_locations(loaded.profile, environ=env)
    assert where.root_from == "$KVENV_ROOT"
    assert where.cache_from == "the default"
    where = resolve_locations(loaded.profile, root=tmp_path / "x", cache="/c", environ=env)
    assert (where.root_from, where.cache_from) == ("--root", "--cache")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
def test_root_without_permission_names_path_and_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = _profile_path(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        monkeypatch.setenv("KVENV_ROOT", str(locked / "root"))
        result = run_cli(["apply", str(profile), "--cache", str(tmp_path / "cache"), "--offline"])
    finally:
        locked.chmod(0o700)
    assert result.code == 2, result.text
    assert str(locked / "root") in result.err and "$KVENV_ROOT" in result.err, result.err
    assert "ermission" in result.err
    assert "kvenv reset" not in result.err
    assert "Traceback" not in result.text


def test_root_under_a_file_names_path_and_origin(tmp_path: Path) -> None:
    profile = _profile_path(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    root = blocker / "root"
    result = run_cli(
        ["apply", str(profile), "--root", str(root), "--cache", str(tmp_path / "c"), "--offline"]
    )
    assert result.code in (2, 3), result.text
    assert str(root) in result.err and "--root" in result.err, result.err
    assert "Traceback" not in result.text


def test_cache_under_a_file_names_path_and_origin(tmp_path: Path) -> None:
    profile = _profile_path(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = blocker / "cache"
    result = run_cli(
        ["apply", str(profile), "--root", str(tmp_path / "r"), "--cache", str(cache), "--offline"]
    )
    assert result.code in (2, 3), result.text
    assert str(cache) in result.err and "--cache" in result.err, result.err
    assert "kvenv reset" not in result.err
    assert "Traceback" not in result.text


def test_permission_denied_root_names_origin_without_reset_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same as above where the suite runs as root (which ignores permissions)."""
    profile = _profile_path(tmp_path)
    denied = tmp_path / "denied"
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        if str(self).startswith(str(denied)):
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    text = profile.read_text()
    profile.write_text(text.replace("[native]", f'[paths]\nroot = "{denied}/rt"\n[native]', 1))
    result = run_cli(["apply", str(profile), "--cache", str(tmp_path / "cache"), "--offline"])
    assert result.code == 2, result.text
    assert f"{denied}/rt" in result.err and "[paths]" in result.err, result.err
    assert "Permission denied" in result.err
    assert "kvenv reset" not in result.err


@pytest.mark.parametrize(("command", "flag"), [("lock", "--cache-dir"), ("bundle", "--cache")])
def test_empty_cache_flag_of_lock_and_bundle_is_refused(
    tmp_path: Path, command: str, flag: str
) -> None:
    profile = _profile_path(tmp_path)
    extra = ["-o", str(tmp_path / "bundle")] if command == "bundle" else []
    before = sorted(p.name for p in Path.cwd().iterdir())
    result = run_cli([command, str(profile), *extra, flag, "", "--offline"])
    assert result.code == 2, result.text
    assert flag in result.err and "empty" in result.err, result.err
    assert sorted(p.name for p in Path.cwd().iterdir()) == before
