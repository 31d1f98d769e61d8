"""``kvenv lock`` refuses a wheel that ships a protected package's import name (a top-level
``torch/`` inside ``evil-1.0`` when torch is protected) when the wheel is at hand, and
``kvenv lock --check`` reports it (issue 12, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.errors import ConflictError
from kvenv.lock.contents import protected_entries
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.sources import IndexConfig
from tests.support.lockenv import HOST_TORCH, basic_house, write_project
from tests.support.wheels import build_wheel, sha256_of

EVIL_FILES = {"evil/__init__.py": "x = 1\n", "torch/__init__.py": "import os\n"}


def test_protected_entries_reads_the_file_list(tmp_path: Path) -> None:
    evil = build_wheel(tmp_path, "evil", "1.0", files=EVIL_FILES)
    assert protected_entries(evil, ["torch"]) == ("torch/",)
    assert protected_entries(evil, ["numpy"]) == ()
    sneaky = build_wheel(
        tmp_path / "s",
        "sneaky",
        "1.0",
        files={"sneaky-1.0.data/platlib/functorch.py": "x\n", "sneaky/__init__.py": ""},
    )
    assert protected_entries(sneaky, ["torch"]) == ("functorch.py",)
    (tmp_path / "junk-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    assert protected_entries(tmp_path / "junk-1.0-py3-none-any.whl", ["torch"]) == ()


def test_lock_refuses_a_wheelhouse_wheel_that_ships_torch(tmp_path: Path) -> None:
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "evil"]
    )
    house = basic_house(tmp_path / "house")
    build_wheel(house, "evil", "1.0", files=EVIL_FILES)
    options = LockOptions(
        index=IndexConfig(find_links=(str(house),), no_index=True), cache_dir=tmp_path / "c"
    )
    with pytest.raises(ConflictError) as caught:
        lock_profile(loaded, options)
    message = caught.value.message
    assert "evil-1.0-py3-none-any.whl" in message and "'torch/'" in message
    assert caught.value.hint is not None and "relock" in caught.value.hint


def test_cli_lock_exits_3_and_writes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "evil"])
    house = basic_house(root / "house")
    build_wheel(house, "evil", "1.0", files=EVIL_FILES)
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 3
    err = capsys.readouterr().err
    assert "evil-1.0-py3-none-any.whl" in err and "torch" in err and "Traceback" not in err
    assert not (root / "locks" / "pylock.testbox.toml").exists()


def test_lock_check_reports_a_locked_wheel_that_ships_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "evil"])
    house = basic_house(root / "house")
    clean = build_wheel(house, "evil", "1.0")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    lock = root / "locks" / "pylock.testbox.toml"
    old_sha, old_size = sha256_of(clean), clean.stat().st_size
    # The lock names a wheel (by sha256 and size) that ships torch/: as if it had been locked
    # before this check existed, or by another tool.
    bad = build_wheel(house, "evil", "1.0", files=EVIL_FILES)
    text = lock.read_text().replace(old_sha, sha256_of(bad))
    text = re.sub(rf"size = {old_size}\b", f"size = {bad.stat().st_size}", text)
    lock.write_text(text)
    capsys.readouterr()
    assert main(["lock", "testbox", "--check", "--json"]) == 1
    report = capsys.readouterr().out
    assert "evil-1.0-py3-none-any.whl" in report and "torch/" in report


def _into_artifact_cache(cache: Path, wheel: Path) -> None:
    from kvenv.fetch.cache import ArtifactCache

    entry = ArtifactCache(cache).entry(sha256_of(wheel))
    entry.mkdir(parents=True)
    (entry / wheel.name).write_bytes(wheel.read_bytes())


def test_lock_and_check_read_a_wheel_from_the_artifact_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvenv._util.urls import allow_loopback_http
    from tests.support.lockenv import serve_index

    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "evil"])
    house = basic_house(tmp_path / "house")
    evil = build_wheel(house, "evil", "1.0", files=EVIL_FILES)
    cache = tmp_path / "cache"  # $KVENV_CACHE_DIR: the lock's and the artifacts' cache
    monkeypatch.chdir(root)
    with serve_index(house) as url, allow_loopback_http():
        argv = ["lock", "testbox", "--index-url", url, "--no-portable"]
        # Not on this machine: the index's wheel is not downloaded to lock it.
        assert main(argv) == 0
        _into_artifact_cache(cache, evil)
        capsys.readouterr()
        assert main(["lock", "testbox", "--check"]) == 1
        err = capsys.readouterr().err
        assert "evil-1.0-py3-none-any.whl" in err and "'torch/'" in err
        # Once it is in the cache, locking again refuses it.
        assert main([*argv, "--fresh"]) == 3
        assert "evil-1.0-py3-none-any.whl" in capsys.readouterr().err
