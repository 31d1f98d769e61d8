"""Recorded answers (kvenv.env.quickstate): recalled only while every captured input is the
same; a change to any of them, or to kvenv's code, is a miss; a bad record is a miss."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kvenv.env import quickstate


def _root(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "root"
    gen = root / "generations" / "20260101T000000-aaaaaa"
    for name in ("native", "overlay", "bin"):
        (gen / name).mkdir(parents=True)
    manifest = {"dirs": {k: str(gen / k) for k in ("native", "overlay", "bin")}}
    (gen / "manifest.json").write_text(json.dumps(manifest))
    (root / "current.json").write_text(json.dumps({"generation": gen.name}))
    (root / ".kvenv-root").write_text("{}")
    (root / "activate.sh").write_text("# shim\n")
    lock = tmp_path / "pylock.toml"
    lock.write_text("lock-version = '1.0'\n")
    return {
        "root": str(root),
        "generations": str(root / "generations"),
        "pointer": str(root / "current.json"),
        "manifest_name": "manifest.json",
        "files": [str(root / ".kvenv.lock.owner"), str(lock)],
    }


def _record(tmp_path: Path, where: dict[str, Any]) -> Path:
    state = quickstate.capture(**where)
    assert state is not None
    memo = tmp_path / "memo"
    quickstate.remember_answer(memo, {"k": 1}, where, state, {"generation": "g"})
    assert quickstate.recall_answer(memo, {"k": 1}) == {"generation": "g"}
    return memo


def _edit(path: Path) -> None:
    path.write_text(path.read_text() + " ")


@pytest.mark.parametrize(
    "change",
    [
        "pointer",
        "manifest",
        "marker",
        "shim",
        "new root file",
        "lock",
        "owner sidecar",
        "new generation",
        "generation dir gone",
    ],
)
def test_any_captured_change_is_a_miss(tmp_path: Path, change: str) -> None:
    where = _root(tmp_path)
    memo = _record(tmp_path, where)
    root = Path(where["root"])
    gen = root / "generations" / "20260101T000000-aaaaaa"
    if change == "pointer":
        _edit(root / "current.json")
    elif change == "manifest":
        _edit(gen / "manifest.json")
    elif change == "marker":
        _edit(root / ".kvenv-root")
    elif change == "shim":
        _edit(root / "activate.sh")
    elif change == "new root file":
        (root / "activate.fish").write_text("")
    elif change == "lock":
        _edit(Path(where["files"][1]))
    elif change == "owner sidecar":
        Path(where["files"][0]).write_text("{}")
    elif change == "new generation":
        (root / "generations" / "20260102T000000-bbbbbb").mkdir()
    else:
        (gen / "bin").rmdir()
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_another_key_or_a_bad_record_is_a_miss(tmp_path: Path) -> None:
    where = _root(tmp_path)
    memo = _record(tmp_path, where)
    assert quickstate.recall_answer(memo, {"k": 2}) is None
    (record,) = memo.glob("*.json")
    record.write_text("{not json")
    assert quickstate.recall_answer(memo, {"k": 1}) is None
    record.write_text(json.dumps({"key": {"k": 1}}))
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_other_code_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = _root(tmp_path)
    memo = _record(tmp_path, where)
    real = quickstate.code_identity()
    monkeypatch.setattr(quickstate, "code_identity", lambda: [*real, ["other.py", 1, 2, 3]])
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_a_record_that_names_other_code_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is filed under its code's identity, and the code it names is checked too: one
    moved to where this code's record would be is still another code's answer."""
    where = _root(tmp_path)
    memo = _record(tmp_path, where)
    (record,) = memo.glob("*.json")
    real = quickstate.code_identity()
    other = [*real, ["other.py", 1, 2, 3]]
    monkeypatch.setattr(quickstate, "code_identity", lambda: other)
    record.rename(quickstate._record_path(memo, {"k": 1}, other))
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_two_kvenvs_sharing_a_cache_keep_their_own_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two kvenv installs (two code identities) answering the same key from one cache, in
    turn: neither replaces the other's record."""
    where = _root(tmp_path)
    state = quickstate.capture(**where)
    assert state is not None
    memo = tmp_path / "memo"
    real = quickstate.code_identity()
    codes = {"before": [*real, ["before.py", 1, 2, 3]], "after": real}
    for label, code in codes.items():
        monkeypatch.setattr(quickstate, "code_identity", lambda code=code: code)
        quickstate.remember_answer(memo, {"k": 1}, where, state, {"by": label})
    for label, code in codes.items():
        monkeypatch.setattr(quickstate, "code_identity", lambda code=code: code)
        assert quickstate.recall_answer(memo, {"k": 1}) == {"by": label}
    assert len(list(memo.glob("*.json"))) == 2


def test_a_recorded_host_that_changed_is_a_miss(tmp_path: Path) -> None:
    where = _root(tmp_path)
    state = quickstate.capture(**where)
    assert state is not None
    memo = tmp_path / "memo"
    host = {"python": None, "sys_path": [], "reads": [["interpreter", None, "not this host"]]}
    quickstate.remember_answer(memo, {"k": 1}, where, state, {"generation": "g"}, host)
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_tree_capture_sees_every_file_change(tmp_path: Path) -> None:
    top = tmp_path / "bundle"
    (top / "wheels").mkdir(parents=True)
    wheel = top / "wheels" / "a.whl"
    wheel.write_bytes(b"abc")
    before = quickstate.capture_tree(str(top))
    assert before is not None and before == quickstate.capture_tree(str(top))
    with wheel.open("r+b") as handle:  # same size, same mtime restored: ctime still moves
        handle.write(b"x")
    st = wheel.stat()
    os.utime(wheel, ns=(st.st_atime_ns, before[-1][5]))
    assert quickstate.capture_tree(str(top)) != before
    assert quickstate.capture_tree(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("change", ["cache entry gone", "cache entry new", "marker", "no marker"])
def test_a_looked_up_entry_that_changed_is_a_miss(tmp_path: Path, change: str) -> None:
    """plan's checks: a cache entry by whether it is a directory, a store marker by bytes."""
    where = _root(tmp_path)
    cached, fresh = tmp_path / "cache" / "aa", tmp_path / "cache" / "bb"
    cached.mkdir(parents=True)
    marker = tmp_path / "store" / "aa" / ".marker"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    where["checks"] = [["dir", str(cached)], ["dir", str(fresh)], ["file", str(marker)]]
    memo = _record(tmp_path, where)
    if change == "cache entry gone":
        cached.rmdir()
    elif change == "cache entry new":
        fresh.mkdir()
    elif change == "marker":
        _edit(marker)
    else:
        marker.unlink()
    assert quickstate.recall_answer(memo, {"k": 1}) is None


def test_an_absent_root_is_a_state_only_when_allowed(tmp_path: Path) -> None:
    where = _root(tmp_path)
    where["root"] = str(tmp_path / "nothing-yet")
    assert quickstate.capture(**where) is None  # apply and status: not recorded
    where["absent_ok"] = True
    memo = _record(tmp_path, where)
    (tmp_path / "nothing-yet").mkdir()  # even an empty root is another state
    assert quickstate.recall_answer(memo, {"k": 1}) is None
