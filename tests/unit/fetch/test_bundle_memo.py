"""A verified bundle in the memo (kind ``bundle``, kvenv.fetch.bundle.open_bundle): a bundle
verified once is not re-hashed while its files are unchanged, and any change of a file (bytes
edited in place with size and mtime restored, a copy in its place, a changed SHA256SUMS) makes
the whole bundle hashed again, and caught."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kvenv._util import memo
from kvenv.cli import main
from kvenv.errors import IntegrityError
from kvenv.fetch import bundle as bundle_module
from kvenv.fetch.bundle import SUMS, make_bundle, open_bundle
from tests.support.applyenv import local_project


@pytest.fixture
def made(tmp_path: Path) -> Path:
    project = local_project(tmp_path / "proj")
    make_bundle(project.loaded(), tmp_path / "bundle", cache=tmp_path / "first-cache")
    return tmp_path / "bundle"


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files open_bundle hashes, in the order it hashes them."""
    seen: list[Path] = []
    real = bundle_module.sha256_file

    def counting(path: Path) -> tuple[str, int]:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(bundle_module, "sha256_file", counting)
    return seen


def _record(cache: Path, bundle: Path) -> Path:
    return memo.record_path(cache, "bundle", str(bundle.absolute()))


def _wheel(bundle: Path) -> Path:
    return next((bundle / "wheels").glob("helper-*.whl"))


def test_a_verified_bundle_is_not_hashed_again(
    made: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    cache = tmp_path / "cache"
    info = open_bundle(made, memo_root=cache)
    assert info.verified and len(hashed) == len(info.sums)
    assert _record(cache, made).is_file()
    hashed.clear()
    assert open_bundle(made, memo_root=cache).verified
    assert hashed == []


def test_without_a_memo_every_file_is_hashed(
    made: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    open_bundle(made, memo_root=tmp_path / "cache")
    hashed.clear()
    info = open_bundle(made)  # `kvenv bundle verify`, `apply --repair`
    assert len(hashed) == len(info.sums)


def test_bytes_changed_in_place_with_size_and_mtime_restored_are_caught(
    made: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    open_bundle(made, memo_root=cache)
    wheel = _wheel(made)
    before = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = wheel.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    with pytest.raises(IntegrityError, match=SUMS) as caught:
        open_bundle(made, memo_root=cache)
    assert str(wheel) in caught.value.render()


def test_a_file_replaced_by_a_copy_hashes_the_bundle_once_more(
    made: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    cache = tmp_path / "cache"
    open_bundle(made, memo_root=cache)
    wheel = _wheel(made)
    copy = tmp_path / "copy.whl"
    shutil.copy2(wheel, copy)
    os.replace(copy, wheel)  # same bytes, size and mtime; another inode
    hashed.clear()
    info = open_bundle(made, memo_root=cache)
    assert wheel in hashed and len(hashed) == len(info.sums)  # one record: the whole bundle
    hashed.clear()
    open_bundle(made, memo_root=cache)
    assert hashed == []


def test_a_moved_bundle_is_verified_in_full(made: Path, tmp_path: Path, hashed: list[Path]) -> None:
    cache = tmp_path / "cache"
    info = open_bundle(made, memo_root=cache)
    moved = tmp_path / "moved"
    made.rename(moved)
    hashed.clear()
    open_bundle(moved, memo_root=cache)
    assert len(hashed) == len(info.sums)
    assert _record(cache, moved) != _record(cache, made)


def test_a_damaged_record_only_costs_a_full_check(
    made: Path, tmp_path: Path, hashed: list[Path]
) -> None:
    cache = tmp_path / "cache"
    info = open_bundle(made, memo_root=cache)
    _record(cache, made).write_text("{not json", encoding="utf-8")
    hashed.clear()
    open_bundle(made, memo_root=cache)
    assert len(hashed) == len(info.sums)
    hashed.clear()
    open_bundle(made, memo_root=cache)
    assert hashed == []  # recorded again


def test_a_failed_check_records_nothing(made: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    wheel = _wheel(made)
    data = bytearray(wheel.read_bytes())
    data[-1] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        open_bundle(made, memo_root=cache)
    assert not _record(cache, made).exists()


def test_a_second_apply_from_the_same_bundle_hashes_nothing_and_changes_nothing(
    made: Path, tmp_path: Path, hashed: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    argv = ["apply", "--offline", "--from", str(made), "--root", str(root), "--cache", str(cache)]
    assert main(argv) == 0
    assert hashed != []
    generations = sorted(p.name for p in (root / "generations").iterdir())
    hashed.clear()
    capsys.readouterr()
    assert main(argv) == 0
    assert "already up to date" in capsys.readouterr().out
    assert hashed == []
    assert sorted(p.name for p in (root / "generations").iterdir()) == generations
