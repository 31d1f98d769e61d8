"""Sealed store entries: read-only after unpacking, reuse checked against the seal, a changed
entry verified in full and never linked when its bytes differ."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvenv._util.hashing import sha256_file
from kvenv.env.seal import record_problems, remove_sealed, seal_problem
from kvenv.env.store import unpack, unpack_all
from tests.support.wheels import build_wheel


def _entry(tmp_path: Path) -> tuple[Path, str, Path]:
    wheel = build_wheel(tmp_path / "wheels", "alpha", "1.0", files={"alpha/core.py": "X = 1\n"})
    sha = sha256_file(wheel)[0]
    store = tmp_path / "store"
    unpack(store, sha, wheel)
    return store, sha, wheel


def test_an_unpacked_entry_is_sealed_read_only(tmp_path: Path) -> None:
    store, sha, _ = _entry(tmp_path)
    core = store / sha / "site" / "alpha" / "core.py"
    assert not os.stat(core).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert not os.stat(core.parent).st_mode & stat.S_IWUSR
    assert seal_problem(store / sha) is None
    assert record_problems(store / sha / "site", "alpha-1.0.dist-info") == []


def test_an_edited_entry_is_unpacked_again_never_linked(tmp_path: Path) -> None:
    store, sha, wheel = _entry(tmp_path)
    core = store / sha / "site" / "alpha" / "core.py"
    os.chmod(core, 0o644)
    core.write_text("X = 2  # tampered\n")
    broken = seal_problem(store / sha)
    assert broken is not None and broken.path == core
    heard: list[str] = []
    entries = unpack_all(store, {sha: wheel}, jobs=1, on_damaged=heard.append)
    assert (entries[sha].path / "site" / "alpha" / "core.py").read_text() == "X = 1\n"
    assert len(heard) == 1 and "alpha 1.0" in heard[0] and "core.py" in heard[0]
    assert seal_problem(store / sha) is None


def test_a_touched_entry_is_resealed_not_unpacked(tmp_path: Path) -> None:
    store, sha, wheel = _entry(tmp_path)
    core = store / sha / "site" / "alpha" / "core.py"
    inode = os.stat(core).st_ino
    os.utime(core, ns=(1, 1))
    assert seal_problem(store / sha) is not None
    heard: list[str] = []
    unpack_all(store, {sha: wheel}, jobs=1, on_damaged=heard.append)
    assert heard == []
    assert os.stat(core).st_ino == inode
    assert seal_problem(store / sha) is None


def test_full_check_catches_an_edit_that_kept_size_and_mtime(tmp_path: Path) -> None:
    store, sha, wheel = _entry(tmp_path)
    core = store / sha / "site" / "alpha" / "core.py"
    before = os.stat(core)
    os.chmod(core, 0o644)
    core.write_text("X = 9\n")  # same size
    os.chmod(core, stat.S_IMODE(before.st_mode))
    os.utime(core, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert seal_problem(store / sha) is None  # the cheap check cannot see it
    heard: list[str] = []
    unpack_all(store, {sha: wheel}, jobs=1, full_check=True, on_damaged=heard.append)
    assert len(heard) == 1
    assert core.read_text() == "X = 1\n"


def test_a_sealed_tree_can_be_removed(tmp_path: Path) -> None:
    store, sha, _ = _entry(tmp_path)
    remove_sealed(store / sha)
    assert not (store / sha).exists()


def test_a_file_added_deep_in_an_entry_is_seen_even_with_the_mtime_set_back(
    tmp_path: Path,
) -> None:
    """No directory is listed on reuse: its ctime (which no ``touch`` sets back) is checked."""
    store, sha, wheel = _entry(tmp_path)
    package = store / sha / "site" / "alpha"
    before = os.stat(package)
    os.chmod(package, 0o755)
    (package / "planted.py").write_text("import os\n")
    os.chmod(package, stat.S_IMODE(before.st_mode))
    os.utime(package, ns=(before.st_atime_ns, before.st_mtime_ns))
    broken = seal_problem(store / sha)
    assert broken is not None and broken.path == package and broken.kind == "dir"
    assert "added, removed or renamed" in broken.message
    # its RECORD files are intact: sealed again (the planted file is never linked: the file
    # list comes from the marker)
    heard: list[str] = []
    unpack_all(store, {sha: wheel}, jobs=1, on_damaged=heard.append)
    assert heard == [] and seal_problem(store / sha) is None


def test_a_removed_file_and_a_writable_directory_break_the_seal(tmp_path: Path) -> None:
    store, sha, _ = _entry(tmp_path)
    package = store / sha / "site" / "alpha"
    os.chmod(package, 0o755)  # a mode change of a directory changes its ctime
    broken = seal_problem(store / sha)
    assert broken is not None and broken.kind == "dir"
    (package / "core.py").unlink()
    broken = seal_problem(store / sha)
    assert broken is not None and broken.path == package / "core.py"
    assert broken.kind == "removed"


def test_a_name_added_at_the_top_of_an_entry_breaks_the_seal(tmp_path: Path) -> None:
    store, sha, _ = _entry(tmp_path)
    top = store / sha
    os.chmod(top, 0o755)
    (top / "extra").mkdir()
    broken = seal_problem(top)
    assert broken is not None and broken.path == top / "extra" and broken.kind == "added"


@pytest.mark.parametrize("older", [1, 2])
def test_an_older_seal_is_checked_in_full_and_sealed_again(tmp_path: Path, older: int) -> None:
    """A seal an older kvenv wrote (format 1: files only; 2: files and directories as JSON
    lists) is neither trusted nor taken for damage: the entry is checked against its RECORD
    and sealed in this format, and ``kvenv verify`` reports nothing."""
    import json

    from kvenv.env.integrity import store_damage
    from kvenv.env.seal import SEAL, SEAL_FORMAT

    store, sha, wheel = _entry(tmp_path)
    seal_file = store / sha / SEAL
    root = store / sha
    files = {
        str(p.relative_to(root)): [p.lstat().st_size, stat.S_IMODE(p.lstat().st_mode),
                                   p.lstat().st_mtime_ns]
        for p in root.rglob("*") if p.is_file() and not p.name.startswith(".kvenv-")
    }  # fmt: skip
    dirs = {str(p.relative_to(root)): p.lstat().st_ctime_ns for p in root.rglob("*") if p.is_dir()}
    old: dict[str, object] = {"format": older, "files": files}
    if older == 2:
        old.update(dirs=dirs, top=sorted(n for n in os.listdir(root) if n != SEAL))
    os.chmod(root, 0o755)
    seal_file.unlink()
    seal_file.write_text(json.dumps(old))
    broken = seal_problem(root)
    assert broken is not None and broken.kind == "old"
    assert store_damage(store, sha) is None
    heard: list[str] = []
    unpack_all(store, {sha: wheel}, jobs=1, on_damaged=heard.append)
    assert heard == []
    assert json.loads(seal_file.read_text())["format"] == SEAL_FORMAT
    assert seal_problem(root) is None


def test_a_damaged_seal_file_is_damage(tmp_path: Path) -> None:
    from kvenv.env.integrity import store_damage
    from kvenv.env.seal import SEAL

    store, sha, _ = _entry(tmp_path)
    root = store / sha
    os.chmod(root, 0o755)
    (root / SEAL).unlink()
    (root / SEAL).write_text('{"format": 3, "files": ["x"], "stats": "!!", "dirs": [], '
                             '"ctimes": "", "top": []}')  # fmt: skip
    broken = seal_problem(root)
    assert broken is not None and broken.kind == "seal"
    found = store_damage(store, sha)
    assert found is not None and "no readable seal" in found.message
