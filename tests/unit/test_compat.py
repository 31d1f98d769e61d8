"""Files outlive a version (issue 36): what older kvenvs wrote (tests/fixtures/compat/<commit>,
see its README) is read by today's code; a file from a newer kvenv is read when it only adds
keys, and refused with "upgrade kvenv" when its format version is newer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvenv._util import tomlio
from kvenv.cli import main
from kvenv.env.manifest import manifest_from_dict
from kvenv.env.root import read_pointer
from kvenv.errors import InputError, LockError
from kvenv.fetch.bundle import read_index
from kvenv.lock.pylock import parse_lock, read_lock
from kvenv.model import formats
from kvenv.model.snapshot import read_snapshot, snapshot_digest, snapshot_from_dict
from tests.support.paths import REPO

COMPAT = REPO / "tests" / "fixtures" / "compat"
COMMITS = sorted(p.name for p in COMPAT.iterdir() if p.is_dir())


def test_there_are_fixtures_from_before_linkage_and_from_main() -> None:
    assert {"86fa6d1", "94d4468"} <= set(COMMITS)
    assert "linkage" not in (COMPAT / "86fa6d1" / "pylock.demo.toml").read_text()


@pytest.mark.parametrize("commit", COMMITS)
def test_an_older_lock_is_read(commit: str) -> None:
    lock = read_lock(COMPAT / commit / "pylock.demo.toml")
    assert lock.kvenv.profile == "demo"
    assert {p.name for p in lock.pylock.packages} >= {"mdurl"}


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("name", ["recorded.host.json", "probed.host.json"])
def test_an_older_host_snapshot_is_read(commit: str, name: str) -> None:
    snapshot = read_snapshot(COMPAT / commit / name)
    recorded = name.startswith("recorded")
    assert snapshot.source == ("recorded" if recorded else "probe")
    if recorded:
        assert snapshot.python.version == "3.11.7"
        assert snapshot.find("torch") is not None
    assert snapshot.kvenv_version is None


@pytest.mark.parametrize("commit", COMMITS)
def test_an_older_manifest_and_pointer_are_read(commit: str, tmp_path: Path) -> None:
    data = json.loads((COMPAT / commit / "manifest.json").read_text())
    manifest = manifest_from_dict(data, file="manifest.json")
    assert manifest.kvenv_version == "0.1.0"
    shutil.copy(COMPAT / commit / "current.json", tmp_path / "current.json")
    pointer = read_pointer(tmp_path)
    assert pointer is not None and pointer.generation == manifest.dirs.generation


@pytest.mark.parametrize("commit", COMMITS)
def test_an_older_bundle_index_is_read(commit: str) -> None:
    index = read_index(COMPAT / commit)
    assert (index.kvenv_version, index.profile.name) == ("0.1.0", "demo")


@pytest.mark.parametrize("commit", COMMITS)
def test_an_older_lock_fails_its_check_with_the_fix_to_relock(
    commit: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read, but it records no content digest: `lock --check` asks for one relock."""
    project = tmp_path / "project"
    (project / "profiles").mkdir(parents=True)
    (project / "locks").mkdir()
    shutil.copy(COMPAT / commit / "demo.toml", project / "profiles" / "demo.toml")
    shutil.copy(COMPAT / commit / "pylock.demo.toml", project / "locks" / "pylock.demo.toml")
    monkeypatch.chdir(project)
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    assert main(["lock", "demo", "--check", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems[0]["path"] == "$.tool.kvenv"
    assert "no content digest" in problems[0]["message"]
    assert "`kvenv lock demo`" in problems[0]["fix"]


# a simulated newer kvenv ----------------------------------------------------------------------
def _newer_lock(data: dict[str, Any], bump: int) -> None:
    tool = data["tool"]["kvenv"]
    tool["schema"] = formats.LOCK_FORMAT + bump
    tool["kvenv-version"] = "9.0.0"
    tool["future-key"] = {"nested": [1, 2]}
    tool["native"]["future-native-key"] = True
    data["packages"][0]["tool"]["kvenv"]["future-package-key"] = "x"


def _newer_json(data: dict[str, Any], bump: int, current: int) -> None:
    data["schema"] = current + bump
    data["kvenv_version"] = "9.0.0"
    data["future_key"] = {"nested": True}


@pytest.mark.parametrize("commit", COMMITS)
def test_a_newer_lock_with_unknown_keys_is_read(commit: str) -> None:
    data = tomlio.read(COMPAT / commit / "pylock.demo.toml")
    _newer_lock(data, 0)
    _, table, tools = parse_lock(data, file="pylock.demo.toml")
    assert table.profile == "demo" and tools[0] is not None


def test_a_newer_lock_format_is_refused_with_upgrade_kvenv(tmp_path: Path) -> None:
    data = tomlio.read(COMPAT / "94d4468" / "pylock.demo.toml")
    _newer_lock(data, 1)
    with pytest.raises(LockError) as caught:
        parse_lock(data, file="pylock.demo.toml")
    (problem,) = caught.value.problems
    assert problem.message == (
        f"written by kvenv 9.0.0 (format {formats.LOCK_FORMAT + 1}); this kvenv reads up to "
        f"{formats.LOCK_FORMAT}: upgrade kvenv"
    )
    assert (problem.file, problem.path) == ("pylock.demo.toml", "$.tool.kvenv.schema")
    assert problem.fix is not None and "upgrade kvenv" in problem.fix


def test_the_cli_refuses_a_newer_lock_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / "profiles").mkdir(parents=True)
    (project / "locks").mkdir()
    shutil.copy(COMPAT / "94d4468" / "demo.toml", project / "profiles" / "demo.toml")
    data = tomlio.read(COMPAT / "94d4468" / "pylock.demo.toml")
    _newer_lock(data, 1)
    (project / "locks" / "pylock.demo.toml").write_text(tomlio.dumps(data))
    monkeypatch.chdir(project)
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    assert main(["lock", "demo", "--check"]) == 2
    said = capsys.readouterr().err
    assert "written by kvenv 9.0.0 (format 2); this kvenv reads up to 1: upgrade kvenv" in said
    assert "$.tool.kvenv.schema" in said and "pylock.demo.toml" in said
    assert "Traceback" not in said


def _snapshot(bump: int) -> dict[str, Any]:
    data = json.loads((COMPAT / "94d4468" / "recorded.host.json").read_text())
    _newer_json(data, bump, formats.SNAPSHOT_FORMAT)
    data["python"]["future_key"] = 1
    return data


def _manifest(bump: int) -> dict[str, Any]:
    data = json.loads((COMPAT / "94d4468" / "manifest.json").read_text())
    _newer_json(data, bump, formats.MANIFEST_FORMAT)
    data["dirs"]["future_key"] = "x"
    return data


def _pointer(bump: int) -> dict[str, Any]:
    data = json.loads((COMPAT / "94d4468" / "current.json").read_text())
    _newer_json(data, bump, formats.POINTER_FORMAT)
    return data


def _bundle(bump: int) -> dict[str, Any]:
    data = json.loads((COMPAT / "94d4468" / "bundle.json").read_text())
    _newer_json(data, bump, formats.BUNDLE_FORMAT)
    data["artifacts"][0]["future_key"] = 1
    return data


def _read_snapshot(data: dict[str, Any], path: Path) -> Any:
    return snapshot_from_dict(data, file=str(path))


def _read_manifest(data: dict[str, Any], path: Path) -> Any:
    return manifest_from_dict(data, file=str(path))


def _read_pointer(data: dict[str, Any], path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "current.json").write_text(json.dumps(data))
    return read_pointer(path.parent)


def _read_bundle(data: dict[str, Any], path: Path) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "bundle.json").write_text(json.dumps(data))
    return read_index(path.parent)


Maker = Callable[[int], dict[str, Any]]
Reader = Callable[[dict[str, Any], Path], Any]
FILES: list[tuple[str, Maker, Reader]] = [
    ("host snapshot", _snapshot, _read_snapshot),
    ("manifest", _manifest, _read_manifest),
    ("pointer", _pointer, _read_pointer),
    ("bundle index", _bundle, _read_bundle),
]


@pytest.mark.parametrize(("what", "make", "read"), FILES, ids=[f[0] for f in FILES])
def test_a_newer_file_with_unknown_keys_is_read(
    what: str, make: Maker, read: Reader, tmp_path: Path
) -> None:
    assert read(make(0), tmp_path / "current.json") is not None


@pytest.mark.parametrize(("what", "make", "read"), FILES, ids=[f[0] for f in FILES])
def test_a_newer_format_is_refused_with_upgrade_kvenv(
    what: str, make: Maker, read: Reader, tmp_path: Path
) -> None:
    data = make(1)
    with pytest.raises(InputError) as caught:
        read(data, tmp_path / "current.json")
    (problem,) = caught.value.problems
    assert problem.message == (
        f"written by kvenv 9.0.0 (format {data['schema']}); this kvenv reads up to "
        f"{data['schema'] - 1}: upgrade kvenv"
    )
    assert problem.path == "$.schema"
    assert problem.file is not None and problem.file.startswith(str(tmp_path))


def test_a_newer_format_without_a_writer_still_says_upgrade() -> None:
    data = _snapshot(1)
    del data["kvenv_version"]
    with pytest.raises(InputError) as caught:
        snapshot_from_dict(data, file="h.json")
    assert caught.value.problems[0].message.startswith("written by a newer kvenv (format 2)")


def test_profiles_stay_strict_about_unknown_keys(tmp_path: Path) -> None:
    """A profile is written by hand: an unknown key is a typo, and is caught."""
    from kvenv.model.loading import load_profile

    path = tmp_path / "demo.toml"
    path.write_text((COMPAT / "94d4468" / "demo.toml").read_text() + "\n[runtime]\ndtpye = 'x'\n")
    with pytest.raises(InputError) as caught:
        load_profile(str(path))
    assert any("unknown key(s): dtpye" in p.message for p in caught.value.problems)


def test_a_snapshot_s_writer_is_not_part_of_its_digest() -> None:
    """A snapshot that names its writer (a newer kvenv's) has the same digest as one that
    does not: a lock made against either stays current."""
    data = json.loads((COMPAT / "94d4468" / "recorded.host.json").read_text())
    plain = snapshot_from_dict(data, file="h.json")
    named = snapshot_from_dict({**data, "kvenv_version": "9.0.0"}, file="h.json")
    assert named.kvenv_version == "9.0.0"
    assert snapshot_digest(named) == snapshot_digest(plain)
