"""The one atomic writer: replace, exclusive creation, cleanup on failure, mode, parents, JSON."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from kvenv._util import atomic


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_write_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    atomic.write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    atomic.write_text(path, "caf\u00e9\n")
    assert path.read_bytes() == "caf\u00e9\n".encode()
    assert _leftovers(tmp_path) == []


def test_exclusive_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    atomic.write_text(path, "first", exclusive=True)
    assert path.read_text() == "first"
    with pytest.raises(FileExistsError):
        atomic.write_text(path, "second", exclusive=True)
    assert path.read_text() == "first"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("durable", [True, False])
def test_a_failed_replace_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    path = tmp_path / "pointer.json"
    path.write_text("old")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        atomic.write_bytes(path, b"new", durable=durable)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pointer.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lock.toml"
    path.write_text("old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.toml"]


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o444, 0o755])
def test_mode_is_set_exactly(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "file"
    atomic.write_bytes(path, b"x", mode=mode)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_default_mode_is_0644(tmp_path: Path) -> None:
    path = tmp_path / "file"
    atomic.write_json(path, {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_parents_are_made_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c.json"
    with pytest.raises(FileNotFoundError):
        atomic.write_json(path, [1])
    assert not (tmp_path / "a").exists()
    atomic.write_json(path, [1], make_parents=True)
    assert json.loads(path.read_text()) == [1]


def test_json_is_indented_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    data = {"b": [1, 2.5, None], "a": "\u00e9"}
    atomic.write_json(path, data)
    assert path.read_text(encoding="utf-8") == json.dumps(data, indent=2) + "\n"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_json_refuses_nan_and_infinity_and_writes_nothing(tmp_path: Path, value: float) -> None:
    path = tmp_path / "m.json"
    path.write_text("old")
    with pytest.raises(ValueError):
        atomic.write_json(path, {"x": [value]})
    assert path.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_fsync_dir_tolerates_a_missing_directory(tmp_path: Path) -> None:
    atomic.fsync_dir(tmp_path)
    atomic.fsync_dir(tmp_path / "absent")


def test_streamed_json_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """A large record is encoded into the file piece by piece; the result is compact JSON
    (what ``json.dumps`` gives), and data that cannot be JSON leaves nothing behind."""
    import json

    from kvenv._util.atomic import write_json_streamed

    data = {"links": ["x" * 100] * 20_000, "answer": {"é": None}}
    target = tmp_path / "record.json"
    write_json_streamed(target, data, durable=False)
    assert target.read_text(encoding="utf-8") == json.dumps(data)
    with pytest.raises(ValueError):
        write_json_streamed(tmp_path / "bad.json", {"x": float("nan")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]
