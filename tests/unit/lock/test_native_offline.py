"""``kvenv lock --offline --fresh`` reads the native wheel's requirements from the metadata
cached by an earlier online lock (issue 12, item 5), instead of failing with "offline"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvenv.errors import FetchError
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.sources import IndexConfig
from kvenv.model.loading import LoadedProfile, load_profile
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    serve_index,
    write_project,
)


def _index_native(tmp_path: Path) -> tuple[LoadedProfile, Path]:
    """A project whose native wheel comes from the index (a copy of it sits in the house)."""
    root = tmp_path / "p"
    loaded = write_project(root, distributions=[HOST_TORCH])
    house = basic_house(tmp_path / "house")
    for wheel in (root / "native").iterdir():
        shutil.copy(wheel, house / wheel.name)
    text = loaded.path.read_text()
    head, _, _ = text.partition("[native.source]")
    loaded.path.write_text(head + '[native.source]\nkind = "index"\n')
    return load_profile(str(loaded.path)), house


def test_offline_fresh_lock_uses_the_cached_native_metadata(tmp_path: Path) -> None:
    loaded, house = _index_native(tmp_path)
    with serve_index(house) as url:
        config = IndexConfig(index_url=url)
        online = lock_profile(
            loaded, LockOptions(index=config, cache_dir=tmp_path / "c", fresh=True)
        )
    assert online.native_from == "index metadata"
    offline = lock_profile(
        loaded, LockOptions(index=config, cache_dir=tmp_path / "c", offline=True, fresh=True)
    )
    assert offline.text == online.text


def test_offline_fresh_lock_with_a_cold_cache_says_what_is_missing(tmp_path: Path) -> None:
    loaded, _house = _index_native(tmp_path)
    config = IndexConfig(index_url="https://index.invalid/simple/")
    with pytest.raises(FetchError, match="offline") as caught:
        lock_profile(
            loaded, LockOptions(index=config, cache_dir=tmp_path / "c", offline=True, fresh=True)
        )
    assert "--native-requires" in (caught.value.hint or "")
