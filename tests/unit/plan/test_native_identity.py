"""The profile's declared ``native.name``/``native.version`` are held against the wheel: its file
name when planning, its METADATA once fetched. A mismatch is refused (exit 2) naming the
profile field, before anything is installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvenv.errors import ProfileError
from kvenv.fetch import fetch_all
from kvenv.model.locations import Locations
from kvenv.plan.artifacts import native_artifact
from tests.support.applyenv import locations, standard_project
from tests.support.hardening import run_cli, tree_state
from tests.support.wheels import build_wheel, sha256_of


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _paths(where: Locations) -> list[str]:
    return ["--root", str(where.root), "--cache", str(where.cache)]


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('name = "nativepkg"', 'name = "Torch-Vision"', "$.native.name"),
        ('version = "1.0"', 'version = "1.1"', "$.native.version"),
    ],
)
def test_file_name_mismatch_is_refused_before_anything_is_written(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    project = standard_project(tmp_path / "proj")
    _sub(project.profile_path, old, new)
    before = tree_state(tmp_path / "proj")
    where = locations(tmp_path)
    for args in (
        ["plan", str(project.profile_path)],
        ["apply", str(project.profile_path), *_paths(where)],
    ):
        result = run_cli(args)
        assert result.code == 2, result.text
        assert "not the one the profile declares" in result.err
        assert f"{project.profile_path}: {field}: " in result.err
        assert "nativepkg-1.0-py3-none-any.whl" in result.err
    assert tree_state(tmp_path / "proj") == before
    assert not where.root.exists() and not where.cache.exists()


def test_a_url_source_is_checked_from_its_file_name(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    text = project.profile_path.read_text()
    start, end = text.index("[native.source]"), text.index("[runtime.env]")
    source = '[native.source]\nkind = "url"\nurl = "https://example.invalid/other-1.0-py3-none-any.whl"\n'
    project.profile_path.write_text(text[:start] + source + text[end:])
    with pytest.raises(ProfileError) as info:
        native_artifact(project.loaded())
    assert "$.native.name" in info.value.render() and "'other'" in info.value.render()


def test_metadata_mismatch_is_refused_after_fetching(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    impostor = build_wheel(tmp_path / "built", "otherpkg", "1.0")
    old_sha, old_size = sha256_of(project.native), project.native.stat().st_size
    renamed = project.native  # the same file name, an impostor's bytes
    renamed.write_bytes(impostor.read_bytes())
    _sub(project.profile_path, old_sha, sha256_of(renamed))
    lock = project.lock_path  # both: [tool.kvenv.native] and the native's own package entry
    lock.write_text(lock.read_text().replace(old_sha, sha256_of(renamed)))
    _sub(lock, f"size = {old_size}", f"size = {renamed.stat().st_size}")
    _sub(project.profile_path, f"size = {old_size}", f"size = {renamed.stat().st_size}")
    artifact = native_artifact(project.loaded())
    assert artifact is not None
    with pytest.raises(ProfileError) as info:
        fetch_all([artifact], cache=tmp_path / "cache")
    text = info.value.render()
    assert "$.native.name" in text and "METADATA" in text and "'otherpkg'" in text
    where = locations(tmp_path)
    result = run_cli(
        ["apply", str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    )
    assert result.code == 2 and "$.native.name" in result.err, result.text
    assert not (where.root / "current.json").exists()


def test_an_edited_native_sha256_in_the_lock_is_quoted_as_the_lock_has_it(tmp_path: Path) -> None:
    """The lock's native sha256 edited by hand: apply's error quotes the lock's (bad) value at
    its ``$.path``, and the profile's as what it should be; nothing is written."""
    project = standard_project(tmp_path / "proj")
    good = sha256_of(project.dir / "wheels" / "nativepkg-1.0-py3-none-any.whl")
    bad = "b" + good[1:] if good[0] != "b" else "c" + good[1:]
    text = project.lock_path.read_text()
    project.lock_path.write_text(
        text.replace(f'hashes = {{sha256 = "{good}"}}', f'hashes = {{sha256 = "{bad}"}}')
    )
    where = locations(tmp_path)
    result = run_cli(["apply", str(project.profile_path), *_paths(where)])
    assert result.code == 2, result.text
    assert f"has sha256 {bad}; the profile pins {good}" in result.err
    assert f"{project.lock_path}: $.packages[1].wheels[0].hashes.sha256: is {bad}" in result.err
    assert not where.root.exists()


def test_lock_check_of_an_edited_native_pin_blames_the_lock_not_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock's ``[tool.kvenv.native] sha256`` edited by hand, the profile unchanged (a lock
    kvenv made for it): the check's hint says the lock was edited, not that the profile
    changed."""
    from tests.support.demo import demo_project

    project = demo_project(tmp_path)
    monkeypatch.chdir(project)
    lock = project / "locks" / "pylock.demo.toml"
    good = re.search(r'sha256 = "([0-9a-f]{64})"', lock.read_text())
    assert good is not None
    bad = ("b" if good.group(1)[0] != "b" else "c") + good.group(1)[1:]
    lock.write_text(lock.read_text().replace(good.group(1), bad))
    result = run_cli(["lock", "--check", "demo"])
    assert result.code == 1, result.text
    assert f"native.sha256 {bad} -> {good.group(1)}): an edited lock" in result.err
    assert "the profile changed since" not in result.err
