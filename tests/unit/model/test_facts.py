"""The recorded facts of a profile (kvenv.model.facts): equal to loading it, and never used
once anything that decided them changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvenv._util import memo
from kvenv.model.facts import FACTS_KIND, cached_facts, remember_facts
from kvenv.model.loading import load_profile

PARENT = """\
schema = 1
name = "base"
description = "parent"
[host]
protected = ["torch"]
[native]
name = "vllm"
version = "0.31.0"
sha256 = "{sha}"
[native.source]
kind = "hf"
repo = "org/wheels"
revision = "0123456789abcdef0123456789abcdef01234567"
filename = "vllm-0.31.0-cp38-abi3-manylinux_2_31_x86_64.whl"
"""

CHILD = """\
schema = 1
name = "child"
extends = "base.toml"
description = "child"
[paths]
root = "/srv/kvenv-root"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    profiles = tmp_path / "proj" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "base.toml").write_text(PARENT.format(sha="a" * 64))
    (profiles / "child.toml").write_text(CHILD)
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    return profiles


def facts_dir() -> Path:
    """Where the memo keeps this kind's records."""
    return Path(os.environ["KVENV_CACHE_DIR"]) / memo.LAYOUT / FACTS_KIND


def _remember(ref: str) -> None:
    remember_facts(load_profile(ref), ref)


def test_facts_equal_the_loaded_profile(project: Path) -> None:
    assert cached_facts("child") is None
    _remember("child")
    facts = cached_facts("child")
    loaded = load_profile("child")
    assert facts is not None
    assert facts.name == "child" and facts.origin == "project"
    assert facts.path == loaded.path and facts.digest == loaded.digest
    assert facts.chain == loaded.chain
    assert facts.configured_root == "/srv/kvenv-root" and facts.configured_cache is None
    assert facts.lock_path == loaded.lock_path
    assert facts.native is not None and facts.native["sha256"] == "a" * 64
    assert facts.owner == ("child", str(loaded.path.resolve()))


def test_a_parent_edited_is_a_miss(project: Path) -> None:
    _remember("child")
    (project / "base.toml").write_text(PARENT.format(sha="b" * 64))
    assert cached_facts("child") is None
    _remember("child")
    facts = cached_facts("child")
    assert facts is not None and facts.native is not None
    assert facts.native["sha256"] == "b" * 64


def test_a_profile_added_where_names_are_looked_up_is_a_miss(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name found in a later directory of the search (``$KVENV_PROFILE_PATH``) is looked up
    again once a profile of that name appears in an earlier one (the project's): the record
    depends on every directory the loader looked in, as it looked."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "solo.toml").write_text(
        CHILD.replace('"child"', '"solo"').replace('extends = "base.toml"\n', "")
    )
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(elsewhere))
    _remember("solo")
    facts = cached_facts("solo")
    assert facts is not None and facts.origin == "KVENV_PROFILE_PATH"
    (project / "solo.toml").write_text((elsewhere / "solo.toml").read_text())
    assert cached_facts("solo") is None  # the project's directory changed: looked up again
    _remember("solo")
    facts = cached_facts("solo")
    assert facts is not None and facts.origin == "project"


def test_a_directory_never_looked_in_does_not_matter(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(elsewhere))
    _remember("child")  # found in the project's directory: the search stopped there
    (elsewhere / "child.toml").write_text("")
    assert cached_facts("child") is not None


def test_another_reference_cwd_or_cache_is_another_record(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _remember("child")
    assert cached_facts("profiles/child.toml") is None
    assert cached_facts("child", cache=tmp_path / "other-cache") is None
    monkeypatch.chdir(tmp_path)
    assert cached_facts("child") is None


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"files": []}', b"[1, 2]"])
def test_a_damaged_record_is_a_miss(project: Path, damage: bytes) -> None:
    _remember("child")
    (record,) = facts_dir().glob("*.json")
    record.write_bytes(damage)
    assert cached_facts("child") is None


def test_a_field_of_the_wrong_type_is_a_miss(project: Path) -> None:
    _remember("child")
    (record,) = facts_dir().glob("*.json")
    record.write_text(record.read_text().replace('"name": "child"', '"name": 7'))
    assert cached_facts("child") is None


def test_an_unwritable_cache_is_no_error(project: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    remember_facts(load_profile("child"), "child", cache=blocker)
    assert cached_facts("child", cache=blocker) is None
    assert not os.path.isdir(blocker)


def test_a_file_edited_after_it_was_read_is_never_vouched_for(project: Path) -> None:
    loaded = load_profile("child")
    (project / "base.toml").write_text(PARENT.format(sha="c" * 64))  # edited meanwhile
    remember_facts(loaded, "child")  # records the bytes the loader parsed
    assert cached_facts("child") is None


def test_a_blank_cache_variable_is_a_miss_not_an_error(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVENV_CACHE_DIR", " ")
    remember_facts(load_profile("child"), "child")
    assert cached_facts("child") is None


def test_two_kvenvs_sharing_a_cache_keep_their_own_records(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two kvenv installs (two code identities) recording the same profile in one cache, in
    turn: neither replaces the other's record, and each reads only its own."""
    real = memo.code_digest()
    codes = {"before": "b" * 64, "after": real}
    for code in codes.values():
        monkeypatch.setattr(memo, "code_digest", lambda code=code: code)
        _remember("child")
    assert len(list(facts_dir().glob("*.json"))) == 2
    for code in codes.values():
        monkeypatch.setattr(memo, "code_digest", lambda code=code: code)
        assert cached_facts("child") is not None
    monkeypatch.setattr(memo, "code_digest", lambda: "c" * 64)
    assert cached_facts("child") is None
