"""Finding profiles (a path, ./profiles/NAME.toml, $KVENV_PROFILE_PATH, built-ins) and
``extends`` (by name, by path, nested overrides, cycles)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from kvenv._util import tomlio
from kvenv.errors import InputError, ProfileError, ProfileNotReadable
from kvenv.model.loading import (
    DEFAULT_PROFILE,
    RecordedHost,
    builtin_dir,
    default_profile_ref,
    iter_profiles,
    load_profile,
    recorded_host,
)
from kvenv.model.profile import HfSource, IndexSource
from tests.support.paths import REPO

ROOT = REPO
BASE = tomlio.read(ROOT / "profiles" / "kaggle-t4x2-cu128.toml")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def write(path: Path, **changes: Any) -> Path:
    """A copy of the built-in profile with top-level ``changes`` (None removes a key)."""
    doc = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


def write_raw(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- discovery -----------------------------------------------------------------------------


def test_builtin_is_found_last(here: Path) -> None:
    loaded = load_profile(DEFAULT_PROFILE)
    assert loaded.origin == "builtin"
    assert loaded.path == builtin_dir() / f"{DEFAULT_PROFILE}.toml"


def test_project_directory_comes_before_env_path_and_builtin(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shelf = tmp_path / "shelf"
    write(shelf / f"{DEFAULT_PROFILE}.toml", description="from the shelf")
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(shelf))
    assert load_profile(DEFAULT_PROFILE).profile.description == "from the shelf"
    assert load_profile(DEFAULT_PROFILE).origin == "KVENV_PROFILE_PATH"
    write(here / "profiles" / f"{DEFAULT_PROFILE}.toml", description="from the project")
    loaded = load_profile(DEFAULT_PROFILE)
    assert (loaded.origin, loaded.profile.description) == ("project", "from the project")


def test_env_path_entries_are_searched_in_order(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(second / "lab.toml", name="lab", description="second")
    monkeypatch.setenv("KVENV_PROFILE_PATH", f"{first}:{second}")
    assert load_profile("lab").profile.description == "second"
    write(first / "lab.toml", name="lab", description="first")
    assert load_profile("lab").profile.description == "first"


def test_a_path_is_taken_as_given(here: Path) -> None:
    write(here / "profiles" / "mine.toml", name="mine", description="discovered")
    elsewhere = write(here / "other" / "mine.toml", name="mine", description="by path")
    assert load_profile("other/mine.toml").profile.description == "by path"
    assert load_profile(str(elsewhere)).origin == "path"
    assert load_profile("mine").profile.description == "discovered"


def test_a_bare_toml_file_name_is_a_path_relative_to_cwd(here: Path) -> None:
    write(here / "plain.toml", name="plain")
    assert load_profile("plain.toml").profile.name == "plain"


def test_missing_name_lists_where_it_looked(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(tmp_path / "shelf"))
    with pytest.raises(ProfileNotReadable) as info:
        load_profile("absent")
    hint = info.value.hint or ""
    assert str(here / "profiles") in hint
    assert str(tmp_path / "shelf") in hint
    assert str(builtin_dir()) in hint


def test_default_profile_and_its_override(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_profile_ref() == DEFAULT_PROFILE
    assert load_profile().profile.name == DEFAULT_PROFILE
    write(here / "profiles" / "lab.toml", name="lab")
    monkeypatch.setenv("KVENV_PROFILE", "lab")
    assert load_profile().profile.name == "lab"


def test_listing_shadows_later_origins(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shelf = tmp_path / "shelf"
    write(shelf / "lab.toml", name="lab")
    write(shelf / f"{DEFAULT_PROFILE}.toml")
    write(here / "profiles" / f"{DEFAULT_PROFILE}.toml")
    write_raw(here / "profiles" / "Not A Name.toml", "")
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(shelf))
    listed = {name: origin for name, origin, _ in iter_profiles()}
    assert listed[DEFAULT_PROFILE] == "project"
    assert listed["lab"] == "KVENV_PROFILE_PATH"
    assert "Not A Name" not in listed


def test_relative_paths_resolve_against_the_project(here: Path) -> None:
    loaded = load_profile(str(write(here / "profiles" / "p.toml", name="p")))
    assert loaded.base_dir == here
    assert loaded.lock_path == here / "locks" / "pylock.kaggle-t4x2-cu128.toml"
    assert loaded.snapshot_path == here / "profiles" / "kaggle-t4x2-cu128.host.json"
    loose = load_profile(str(write(here / "loose" / "q.toml", name="q")))
    assert loose.base_dir == here / "loose"


# --- extends -------------------------------------------------------------------------------


def test_extends_by_name_overrides_nested_fields(here: Path) -> None:
    write_raw(
        here / "profiles" / "t4x1.toml",
        'schema = 1\nname = "t4x1"\nextends = "kaggle-t4x2-cu128"\n'
        "[target.gpu]\ncount = 1\n[runtime]\ntensor_parallel_size = 1\n",
    )
    loaded = load_profile("t4x1")
    parent = load_profile(DEFAULT_PROFILE).profile
    p = loaded.profile
    assert p.name == "t4x1"
    assert p.extends == "kaggle-t4x2-cu128"
    assert p.target is not None and parent.target is not None
    assert p.target.gpu is not None and parent.target.gpu is not None
    assert p.target.gpu.count == 1
    assert p.target.gpu.model == parent.target.gpu.model == "Tesla T4"
    assert p.target.gpu.compute_capability == "7.5"
    assert p.runtime.tensor_parallel_size == 1
    assert p.runtime.dtype == parent.runtime.dtype == "float16"
    assert p.native == parent.native
    assert loaded.chain == (
        here / "profiles" / "t4x1.toml",
        builtin_dir() / "kaggle-t4x2-cu128.toml",
    )
    assert loaded.digest != load_profile(DEFAULT_PROFILE).digest


def test_a_child_native_source_of_another_kind_replaces_the_parents(here: Path) -> None:
    """The built-in Kaggle profile pins an ``hf`` source; a child that pins an ``index`` one
    (what ``kvenv pin NAME==VERSION`` writes) gets that source alone, not the parent's
    ``repo``/``revision`` beside it; a source of the same kind still merges key by key."""
    sha = "ab" * 32
    write_raw(
        here / "profiles" / "team.toml",
        'schema = 1\nname = "team"\nextends = "kaggle-t4x2-cu128"\n'
        f'[native]\nname = "vllm"\nversion = "0.18.2"\nsha256 = "{sha}"\nsize = 10\n'
        '[native.source]\nkind = "index"\nfilename = "vllm-0.18.2-cp312-cp312-linux_x86_64.whl"\n',
    )
    native = load_profile("team").profile.native
    assert native is not None and native.version == "0.18.2"
    assert native.source == IndexSource(
        kind="index", filename="vllm-0.18.2-cp312-cp312-linux_x86_64.whl"
    )
    revision = "1" * 40
    write_raw(
        here / "profiles" / "bump.toml",
        'schema = 1\nname = "bump"\nextends = "kaggle-t4x2-cu128"\n'
        f'[native.source]\nrevision = "{revision}"\n',
    )
    parent = load_profile(DEFAULT_PROFILE).profile.native
    bumped = load_profile("bump").profile.native
    assert isinstance(bumped.source, HfSource) and isinstance(parent.source, HfSource)  # type: ignore[union-attr]
    assert bumped.source.revision == revision  # type: ignore[union-attr]
    assert bumped.source.repo == parent.source.repo  # type: ignore[union-attr]


def test_extends_by_path_is_relative_to_the_child_file(here: Path) -> None:
    write(here / "team" / "base" / "gpu.toml", name="gpu", description="base")
    write_raw(
        here / "team" / "child.toml",
        'schema = 1\nname = "child"\nextends = "base/gpu.toml"\n[paths]\nroot = "/opt/kv"\n',
    )
    p = load_profile("team/child.toml").profile
    assert (p.description, p.paths.root) == ("base", "/opt/kv")
    assert p.paths.cache == "/kaggle/working/kvenv-cache"


def test_extends_by_name_prefers_the_sibling_file(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shelf = tmp_path / "shelf"
    write(shelf / "base.toml", name="base", description="sibling")
    write(here / "profiles" / "base.toml", name="base", description="project")
    write_raw(shelf / "child.toml", 'schema = 1\nname = "child"\nextends = "base"\n')
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(shelf))
    assert load_profile("child").profile.description == "sibling"


def test_a_project_profile_may_extend_the_builtin_of_the_same_name(here: Path) -> None:
    write_raw(
        here / "profiles" / f"{DEFAULT_PROFILE}.toml",
        f'schema = 1\nname = "{DEFAULT_PROFILE}"\nextends = "{DEFAULT_PROFILE}"\n'
        '[paths]\nroot = "/data/kvenv"\n',
    )
    loaded = load_profile(DEFAULT_PROFILE)
    assert loaded.origin == "project"
    assert loaded.profile.paths.root == "/data/kvenv"
    assert loaded.chain[1] == builtin_dir() / f"{DEFAULT_PROFILE}.toml"


def test_lists_are_replaced_not_merged(here: Path) -> None:
    write_raw(
        here / "profiles" / "more.toml",
        f'schema = 1\nname = "more"\nextends = "{DEFAULT_PROFILE}"\n'
        '[host]\nprotected = ["torch", "triton"]\n',
    )
    assert load_profile("more").profile.host.protected == ["torch", "triton"]


def test_the_name_is_not_inherited(here: Path) -> None:
    write_raw(here / "nameless.toml", f'schema = 1\nextends = "{DEFAULT_PROFILE}"\n')
    with pytest.raises(ProfileError) as info:
        load_profile("nameless.toml")
    assert [p.path for p in info.value.problems] == ["$.name"]


def test_three_level_chain_and_cycle(here: Path) -> None:
    write(here / "profiles" / "a.toml", name="a", description="a")
    write_raw(here / "profiles" / "b.toml", 'schema = 1\nname = "b"\nextends = "a"\n')
    write_raw(here / "profiles" / "c.toml", 'schema = 1\nname = "c"\nextends = "b"\n')
    loaded = load_profile("c")
    assert [p.stem for p in loaded.chain] == ["c", "b", "a"]
    assert loaded.profile.description == "a"
    write_raw(here / "profiles" / "a.toml", 'schema = 1\nname = "a"\nextends = "c"\n')
    with pytest.raises(ProfileError) as info:
        load_profile("c")
    assert "cycle" in info.value.message
    assert info.value.problems[0].path == "$.extends"


def test_a_parent_that_is_not_toml_is_unreadable(here: Path) -> None:
    write_raw(here / "profiles" / "broken.toml", "schema = = 1\n")
    write_raw(here / "child.toml", 'schema = 1\nname = "child"\nextends = "broken"\n')
    with pytest.raises(ProfileNotReadable) as info:
        load_profile("child.toml")
    assert "broken.toml" in info.value.message


def test_inherited_relative_paths_stay_relative_to_the_parent(here: Path) -> None:
    wheel_project = here.parent / "wheels-project"
    parent = copy.deepcopy(BASE)
    parent["name"] = "local"
    parent["native"]["source"] = {"kind": "path", "path": "dist/vllm.whl"}
    write_raw(wheel_project / "profiles" / "local.toml", tomli_w.dumps(parent))
    write_raw(
        here / "profiles" / "mine.toml",
        f'schema = 1\nname = "mine"\nextends = "{wheel_project}/profiles/local.toml"\n',
    )
    loaded = load_profile("mine")
    assert loaded.snapshot_path == wheel_project / "profiles" / "kaggle-t4x2-cu128.host.json"
    assert loaded.resolve("dist/vllm.whl") == wheel_project / "dist" / "vllm.whl"
    assert loaded.resolve("other/file") == here / "other" / "file"
    # a lock records one profile: the child does not inherit its parent's lock file
    assert loaded.profile.overlay.lock is None
    assert loaded.lock_path == here / "locks" / "pylock.mine.toml"


def test_a_child_may_set_its_own_relative_paths(here: Path) -> None:
    write_raw(
        here / "profiles" / "own.toml",
        f'schema = 1\nname = "own"\nextends = "{DEFAULT_PROFILE}"\n'
        '[host]\nsnapshot = "snapshots/own.json"\n[overlay]\nlock = "locks/own.toml"\n',
    )
    loaded = load_profile("own")
    assert loaded.snapshot_path == here / "snapshots" / "own.json"
    assert loaded.lock_path == here / "locks" / "own.toml"


# --- the recorded host snapshot ------------------------------------------------------------


def test_recorded_host_reads_the_snapshot_the_profile_names(here: Path) -> None:
    recorded = recorded_host(load_profile(DEFAULT_PROFILE))
    assert recorded.missing is None
    assert recorded.snapshot is not None and recorded.snapshot.python.abi == "cp312"


def test_recorded_host_says_why_there_is_none(here: Path) -> None:
    host = {"protected": ["torch"]}
    write(here / "profiles" / "bare.toml", name="bare", host=host)
    assert recorded_host(load_profile("bare")) == RecordedHost(
        None, "the profile names no host snapshot"
    )
    write(here / "profiles" / "gone.toml", name="gone", host={**host, "snapshot": "no/such.json"})
    loaded = load_profile("gone")
    recorded = recorded_host(loaded)
    assert recorded.snapshot is None
    assert recorded.missing == f"the profile's host snapshot {here}/no/such.json does not exist"
    with pytest.raises(InputError, match="host snapshot not found"):
        recorded_host(loaded, must_exist=True)


def test_recorded_host_refuses_a_broken_snapshot(here: Path) -> None:
    write_raw(here / "snap.json", "{not json")
    host = {"protected": ["torch"], "snapshot": "snap.json"}
    write(here / "profiles" / "broken.toml", name="broken", host=host)
    with pytest.raises(InputError, match="not valid JSON"):
        recorded_host(load_profile("broken"))
