"""The applied state read as plain data (kvenv.env.plainstate): the same facts as the full
readers (:mod:`kvenv.env.root`, :mod:`kvenv.env.manifest`), the same owner rule, and None
(unsure) for anything the full readers were not seen to accept."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import attrs
import pytest

from kvenv.env import plainstate
from kvenv.env.activation import ShellHook
from kvenv.env.manifest import MANIFEST_NAME
from kvenv.env.plainstate import (
    PlainState,
    apply_in_progress,
    owned_by_other,
    read_current,
    ready,
    vouch,
)
from kvenv.env.root import (
    GENERATIONS,
    OWNER_SUFFIX,
    POINTER_NAME,
    RootOwner,
    current_state,
    foreign_owner,
)
from kvenv.env.shellrender import SHELLS, render
from kvenv.model.locations import LOCK_NAME, ROOT_MARKER, Locations
from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project, locations


def test_the_names_agree_with_the_full_readers() -> None:
    assert plainstate._POINTER == POINTER_NAME
    assert plainstate._GENERATIONS == GENERATIONS
    assert plainstate._MANIFEST == MANIFEST_NAME
    assert plainstate._MARKER == ROOT_MARKER
    assert plainstate._LOCK_OWNER == LOCK_NAME + OWNER_SUFFIX
    from kvenv.env import rootfiles

    assert rootfiles.MANIFEST_FILE == MANIFEST_NAME  # the recall writes the manifest there
    package = Path(plainstate.__file__).resolve().parent.parent
    assert all((package / name).is_file() for name in plainstate._CODE)


@pytest.fixture
def applied(tmp_path: Path) -> Locations:
    project = local_project(tmp_path / "proj")
    where = locations(tmp_path)
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    assert result.status == "applied"
    return where


def _vouched(where: Locations) -> PlainState:
    _, manifest = current_state(where)  # the full reader accepts it...
    assert manifest is not None
    assert read_current(where.root, where.cache) is None  # ...but nobody said so yet
    vouch(where.root, where.cache, where.root / GENERATIONS / manifest.generation / MANIFEST_NAME)
    state = read_current(where.root, where.cache)
    assert state is not None
    return state


def test_the_plain_state_is_the_full_readers_state(applied: Locations) -> None:
    state = _vouched(applied)
    pointer, manifest = current_state(applied)
    assert pointer is not None and manifest is not None
    assert (state.generation, state.previous, state.manifest_sha256) == (
        pointer.generation,
        pointer.previous,
        pointer.manifest_sha256,
    )
    assert state.manifest_path == applied.root / GENERATIONS / pointer.generation / MANIFEST_NAME
    assert state.kvenv_version == manifest.kvenv_version
    assert state.python == manifest.python
    assert state.profile_name == manifest.profile.name
    assert state.profile_digest == manifest.profile.digest
    assert state.lock_digest == manifest.lock_digest
    assert state.native_sha256 == (manifest.native.sha256 if manifest.native else None)
    assert state.dirs == attrs.asdict(manifest.dirs)
    assert state.protected == manifest.protected
    for field in attrs.fields(type(manifest.activation)):
        assert getattr(state.activation, field.name) == getattr(manifest.activation, field.name)
    args = (manifest.profile.digest, manifest.lock_digest, state.native_sha256)
    assert state.matches(*args) and manifest.matches(*args)
    assert not state.matches("sha256:other", manifest.lock_digest, state.native_sha256)
    for shell in SHELLS:
        where = str(state.manifest_path)
        environ = {"PATH": "/usr/bin"}
        assert render(state.activation, shell, manifest_path=where, environ=environ) == render(
            manifest.activation, shell, manifest_path=where, environ=environ
        )
    assert ready(state)


def test_json_prints_the_shell_hooks_fields_in_order(applied: Locations) -> None:
    state = _vouched(applied)
    data = json.loads(render(state.activation, "json", environ={}))
    assert list(data) == [f.name for f in attrs.fields(ShellHook)]


def test_edited_bytes_are_never_used(applied: Locations) -> None:
    state = _vouched(applied)
    data = json.loads(state.manifest_path.read_text())
    data["activation"]["env"]["LD_PRELOAD"] = "/tmp/evil.so"
    state.manifest_path.write_text(json.dumps(data))
    assert read_current(applied.root, applied.cache) is None  # the pointer's digest differs
    pointer = json.loads((applied.root / POINTER_NAME).read_text())
    pointer["manifest_sha256"] = hashlib.sha256(state.manifest_path.read_bytes()).hexdigest()
    (applied.root / POINTER_NAME).write_text(json.dumps(pointer))
    assert read_current(applied.root, applied.cache) is None  # no verdict for these bytes
    vouch(applied.root, applied.cache, state.manifest_path)
    again = read_current(applied.root, applied.cache)
    assert again is not None and again.activation.env["LD_PRELOAD"] == "/tmp/evil.so"


def test_a_verdict_is_for_one_root(applied: Locations, tmp_path: Path) -> None:
    _vouched(applied)
    assert read_current(applied.root, tmp_path / "another-cache") is None


@pytest.mark.parametrize(
    "pointer",
    [
        "{not json",
        json.dumps([1]),
        json.dumps({"schema": 2, "generation": "g", "manifest_sha256": "x"}),
        json.dumps({"schema": True, "generation": "g", "manifest_sha256": "x"}),
        json.dumps({"schema": 1, "generation": "../g", "manifest_sha256": "x"}),
        json.dumps({"schema": 1, "generation": "g", "manifest_sha256": None}),
        json.dumps({"schema": 1, "generation": "g", "manifest_sha256": "x", "extra": 1}),
    ],
)
def test_an_unexpected_pointer_is_unsure(applied: Locations, pointer: str) -> None:
    _vouched(applied)
    (applied.root / POINTER_NAME).write_text(pointer)
    assert read_current(applied.root, applied.cache) is None


def test_nothing_applied_is_unsure(tmp_path: Path) -> None:
    assert read_current(tmp_path / "root", tmp_path / "cache") is None


def test_not_ready_when_a_dir_is_missing_or_shadows(applied: Locations) -> None:
    state = _vouched(applied)
    overlay = Path(state.dirs["overlay"])
    (overlay / "torch").mkdir()
    assert not ready(state)
    (overlay / "torch").rmdir()
    assert ready(state)
    (overlay / "torch.py").write_text("")
    assert not ready(state)


@pytest.mark.parametrize(
    "marker",
    [
        None,
        "{not json",
        json.dumps({"kvenv": "1"}),
        json.dumps({"owner": "t"}),
        json.dumps({"owner": {"name": 3}}),
        json.dumps({"owner": {"name": "t", "file": None}}),
        json.dumps({"owner": {"name": "t", "file": "/p/t.toml"}}),
        json.dumps({"owner": {"name": "t", "file": 7}}),
        json.dumps({"owner": {"name": "other", "file": None}}),
        json.dumps({"owner": {"name": "t", "file": "/q/t.toml"}}),
    ],
)
@pytest.mark.parametrize("owner", [("t", None), ("t", "/p/t.toml")])
def test_the_owner_rule_is_the_full_readers(
    tmp_path: Path, marker: str | None, owner: tuple[str, str | None]
) -> None:
    if marker is not None:
        (tmp_path / ROOT_MARKER).write_text(marker)
    expected = foreign_owner(tmp_path, RootOwner(*owner)) is not None
    assert owned_by_other(tmp_path, owner) is expected


def test_an_apply_in_progress_is_seen(tmp_path: Path) -> None:
    assert not apply_in_progress(tmp_path)
    (tmp_path / (LOCK_NAME + OWNER_SUFFIX)).write_text("pid 1 on here\n")
    assert apply_in_progress(tmp_path)
