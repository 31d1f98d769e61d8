"""Inputs at the edges of a profile: non-finite numbers, oversized files, overlong text."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.errors import KvenvError, LockError, ProfileError, ProfileNotReadable
from kvenv.model.fields import MAX_PROFILE_BYTES, MAX_TEXT_CHARS
from kvenv.model.loading import load_profile
from tests.support.profiles import loads_profile

BASE = 'schema = 1\nname = "edge"\n'


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("value", ["nan", "+nan", "-nan", "inf", "+inf", "-inf"])
def test_non_finite_float_is_refused(value: str) -> None:
    with pytest.raises(ProfileError) as info:
        loads_profile(BASE + f"[runtime]\ngpu_memory_utilization = {value}\n", file="p.toml")
    (problem,) = info.value.problems
    assert problem.path == "$.runtime.gpu_memory_utilization"
    assert problem.file == "p.toml"
    assert "finite" in problem.message


def test_non_finite_float_is_refused_in_a_profile_file(here: Path) -> None:
    path = here / "nan.toml"
    path.write_text(BASE + "[runtime]\ngpu_memory_utilization = nan\n", encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert [p.path for p in info.value.problems] == ["$.runtime.gpu_memory_utilization"]


def test_finite_fraction_still_validates() -> None:
    profile = loads_profile(BASE + "[runtime]\ngpu_memory_utilization = 0.9\n")
    assert profile.runtime.gpu_memory_utilization == 0.9


def test_overlong_description_is_refused_naming_file_and_field(here: Path) -> None:
    path = here / "long.toml"
    path.write_text(BASE.replace('"edge"', '"long"') + f'description = "{"x" * 50_000}"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    (problem,) = info.value.problems
    assert problem.path == "$.description" and problem.file == str(path)
    assert str(MAX_TEXT_CHARS) in problem.message and problem.fix
    assert len(info.value.render()) < 1000


def test_overlong_env_value_and_parent_field_name_the_parent(here: Path) -> None:
    parent = here / "parent.toml"
    parent.write_text(
        'schema = 1\nname = "parent"\n[runtime.env]\nBIG = "' + "y" * (MAX_TEXT_CHARS + 1) + '"\n'
    )
    child = here / "child.toml"
    child.write_text('schema = 1\nname = "child"\nextends = "parent.toml"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(child))
    (problem,) = info.value.problems
    assert problem.path == "$.runtime.env.BIG" and problem.file == str(parent)


def test_text_at_the_cap_is_accepted(here: Path) -> None:
    path = here / "cap.toml"
    path.write_text(BASE.replace('"edge"', '"cap"') + f'description = "{"x" * MAX_TEXT_CHARS}"\n')
    assert len(load_profile(str(path)).profile.description) == MAX_TEXT_CHARS


def test_oversized_profile_file_is_refused_without_reading_it_all(here: Path) -> None:
    path = here / "huge.toml"
    path.write_text(BASE.replace('"edge"', '"huge"') + "#" * MAX_PROFILE_BYTES + "\n")
    with pytest.raises(ProfileNotReadable) as info:
        load_profile(str(path))
    text = info.value.render()
    assert str(path) in text and str(MAX_PROFILE_BYTES) in text
    assert len(text) < 1000


def test_oversized_lock_file_is_refused(tmp_path: Path) -> None:
    from kvenv.lock.pylock import MAX_LOCK_BYTES, read_lock

    path = tmp_path / "pylock.big.toml"
    with path.open("w") as stream:
        stream.write('lock-version = "1.0"\n')
        stream.truncate(MAX_LOCK_BYTES + 1)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert str(path) in info.value.render() and str(MAX_LOCK_BYTES) in info.value.render()
    assert isinstance(info.value, KvenvError)
