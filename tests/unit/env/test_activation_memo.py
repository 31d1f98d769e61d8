"""A root's applied activation as a memo record (kind ``activation``): what
:func:`kvenv.env.runenv.applied_activation` computed on the full path (the owner check, the
pointer, the manifest read and checked, activation's own checks), kept once the command
succeeded and used while everything that path read is unchanged: it renders what the full
path renders, and any change to the marker, the pointer, the manifest's bytes or the overlay
and native dirs is a miss (None)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from kvenv._util import memo
from kvenv.env.activation import ShellHook
from kvenv.env.manifest import Activation
from kvenv.env.root import POINTER_NAME
from kvenv.env.runenv import applied_activation, recorded_activation
from kvenv.env.shellrender import SHELLS, render
from kvenv.model.locations import ROOT_MARKER, Locations
from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project
from tests.support.audit import reads_of, uncovered

Applied = tuple[Locations, str]


@pytest.fixture
def applied(tmp_path: Path) -> Applied:
    project = local_project(tmp_path / "proj")
    where = Locations(tmp_path / "root", tmp_path / "cache", "--root", "--cache")
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    assert result.status == "applied"
    return where, project.loaded().profile.name


def _full(applied: Applied) -> tuple[Activation, Path]:
    """The full path, its record kept as a command that succeeded keeps it."""
    where, name = applied
    on_success: list[Callable[[], None]] = []
    found = applied_activation(where, name, None, on_success)
    assert recorded_activation(where.cache, where.root, name) is None  # not before success
    for keep in on_success:
        keep()
    return found


def _recalled(applied: Applied) -> object:
    where, name = applied
    return recorded_activation(where.cache, where.root, name)


def _manifest(where: Locations) -> Path:
    """The current manifest's file (by the pointer alone: it may have been edited)."""
    generation = json.loads((where.root / POINTER_NAME).read_text())["generation"]
    return where.root / "generations" / generation / "manifest.json"


def test_the_record_renders_what_the_full_path_renders(applied: Applied) -> None:
    activation, path = _full(applied)
    found = recorded_activation(applied[0].cache, applied[0].root, applied[1])
    assert found is not None and found[1] == path
    for field in attrs.fields(Activation):
        assert getattr(found[0], field.name) == getattr(activation, field.name)
    for shell in SHELLS:
        environ = {"PATH": "/usr/bin"}
        assert render(found[0], shell, manifest_path=str(path), environ=environ) == render(
            activation, shell, manifest_path=str(path), environ=environ
        )
    data = json.loads(render(found[0], "json", environ={}))
    assert list(data) == [f.name for f in attrs.fields(ShellHook)]


def _repoint(where: Locations) -> None:
    pointer = json.loads((where.root / POINTER_NAME).read_text())
    pointer["manifest_sha256"] = hashlib.sha256(_manifest(where).read_bytes()).hexdigest()
    (where.root / POINTER_NAME).write_text(json.dumps(pointer))


def _edit(where: Locations) -> None:
    path = _manifest(where)
    data = json.loads(path.read_text())
    data["activation"]["env"]["LD_PRELOAD"] = "/tmp/evil.so"
    path.write_text(json.dumps(data))


def _dirs(where: Locations) -> dict[str, str]:
    return dict(json.loads(_manifest(where).read_text())["dirs"])


CHANGES: dict[str, Callable[[Locations], object]] = {
    "manifest edited": _edit,
    "manifest edited, pointer rewritten": lambda w: (_edit(w), _repoint(w)),
    "pointer damaged": lambda w: (w.root / POINTER_NAME).write_text("{not json"),
    "pointer removed": lambda w: (w.root / POINTER_NAME).unlink(),
    "marker names another profile": lambda w: (w.root / ROOT_MARKER).write_text(
        json.dumps({"owner": {"name": "someone-else", "file": None}})
    ),
    "marker removed": lambda w: (w.root / ROOT_MARKER).unlink(),
    "overlay removed": lambda w: shutil.rmtree(_dirs(w)["overlay"]),
    "native removed": lambda w: shutil.rmtree(_dirs(w)["native"]),
    "a protected package in the overlay": lambda w: (Path(_dirs(w)["overlay"]) / "torch").mkdir(),
    "a protected module in the native dir": lambda w: (
        Path(_dirs(w)["native"]) / "torch.py"
    ).write_text(""),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_to_what_the_full_path_read_is_a_miss(applied: Applied, change: str) -> None:
    _full(applied)
    assert _recalled(applied) is not None
    CHANGES[change](applied[0])
    assert _recalled(applied) is None


def test_a_record_is_for_its_root_and_profile(applied: Applied, tmp_path: Path) -> None:
    where, name = applied
    _full(applied)
    assert recorded_activation(where.cache, where.root, "another") is None
    assert recorded_activation(where.cache, tmp_path / "elsewhere", name) is None
    assert recorded_activation(tmp_path / "another-cache", where.root, name) is None


def test_nothing_applied_records_nothing(tmp_path: Path) -> None:
    where = Locations(tmp_path / "root", tmp_path / "cache", "--root", "--cache")
    on_success: list[Callable[[], None]] = []
    with pytest.raises(Exception, match="nothing is applied"):
        applied_activation(where, "demo", None, on_success)
    assert on_success == [] and not (tmp_path / "cache").exists()


def test_the_record_depends_on_everything_the_full_path_read(applied: Applied) -> None:
    """Completeness (tests/support/audit.py): every file the full path opened or listed is
    covered by a dependency of the record it kept; without the dirs' listings it is not."""
    where, name = applied
    _, reads = reads_of(lambda: _full(applied))
    path = memo.record_path(where.cache, "activation", [str(where.root), name])
    deps = json.loads(path.read_text())["deps"]
    assert uncovered(reads, deps, memo_root=where.cache) == []
    overlay = _dirs(where)["overlay"]
    assert ("list", overlay) in reads
    fewer = [d for d in deps if d[:2] != ["listing", overlay]]
    assert uncovered(reads, fewer, memo_root=where.cache) == [("list", overlay)]
