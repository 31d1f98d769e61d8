"""A warm apply into a fresh root, with the store entry behind it changed in place (a write
through another generation's hard link: no directory's ctime shows it, only the file's size or
mtime): the changed bytes are never linked (the entry is unpacked again from the verified
wheel, with a warning), and a mere touch is sealed again without unpacking."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvenv.env.root import current_state
from kvenv.env.seal import seal_problem
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    standard_project,
)


def _edit_in_place(path: Path, text: str) -> None:
    """Change a sealed file's bytes through its inode, as a write through a generation's hard
    link would: its directory's ctime does not change, only the file's size or mtime."""
    mode = stat.S_IMODE(path.stat().st_mode)
    os.chmod(path, mode | stat.S_IWUSR)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.chmod(path, mode)


def _apply_into(project: Project, where: Locations, site: Path) -> list[str]:
    result = apply(project.loaded(), project.lock(), host_snapshot(site), where, jobs=2)
    assert result.status == "applied"
    return result.warnings


def test_an_entry_edited_in_place_is_unpacked_again_never_linked(
    tmp_path: Path,
) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    first = locations(tmp_path)
    _apply_into(project, first, site)
    store_file = next(first.store.glob("*/site/helper/__init__.py"))
    original = store_file.read_text()
    _edit_in_place(store_file, "V = 'planted'\n")
    assert seal_problem(store_file.parents[2]) is not None

    second = Locations(root=tmp_path / "root2", cache=first.cache)  # a fresh root, warm store
    warnings = _apply_into(project, second, site)
    assert any("helper" in w and "damaged" in w for w in warnings), warnings
    _, manifest = current_state(second)
    assert manifest is not None
    linked = Path(manifest.dirs.overlay) / "helper" / "__init__.py"
    assert linked.read_text() == original
    fresh = next(first.store.glob("*/site/helper/__init__.py"))
    assert fresh.read_text() == original and seal_problem(fresh.parents[2]) is None
    assert linked.stat().st_ino == fresh.stat().st_ino  # linked from the new entry


def test_a_touched_entry_is_resealed_and_linked(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    first = locations(tmp_path)
    _apply_into(project, first, site)
    store_file = next(first.store.glob("*/site/helper/__init__.py"))
    inode = store_file.stat().st_ino
    os.utime(store_file, ns=(1, 1))

    second = Locations(root=tmp_path / "root2", cache=first.cache)
    assert _apply_into(project, second, site) == []
    _, manifest = current_state(second)
    assert manifest is not None
    assert (Path(manifest.dirs.overlay) / "helper" / "__init__.py").stat().st_ino == inode
    assert seal_problem(store_file.parents[2]) is None
