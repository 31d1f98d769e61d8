"""kvenv.env.strays on a generation that uses every directory a generation can have: console
scripts in ``bin/``, a wheel's ``.data/data`` in ``data/`` and its headers in ``include/``,
and Python's own byte code beside listed modules. Nothing of that is an added file; a file
added to any of those directories is, and ``remove_strays`` removes only it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.env.manifest import Manifest
from kvenv.env.root import current_state
from kvenv.env.strays import remove_strays, stray_files
from tests.support.applyenv import (
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    native_wheel,
    write_project,
)
from tests.support.wheels import build_wheel

DATA_FILES = {
    "datapkg/__init__.py": "X = 1\n",
    "datapkg-1.0.data/data/share/datapkg/conf.txt": "conf\n",
    "datapkg-1.0.data/headers/datapkg.h": "int x;\n",
    "datapkg-1.0.data/scripts/datatool": "#!python\nprint('tool')\n",
}


@pytest.fixture
def generation(tmp_path: Path) -> tuple[Path, Manifest]:
    wheels = tmp_path / "proj" / "wheels"
    helper = build_wheel(wheels, "helper", "2.0", files={"helper/__init__.py": "V = 2\n"})
    data = build_wheel(wheels, "datapkg", "1.0", files=DATA_FILES)
    project = write_project(
        tmp_path / "proj", native=native_wheel(wheels), overlay=[helper, data], allow_pth=()
    )
    where = locations(tmp_path)
    apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    manifest = current_state(where)[1]
    assert manifest is not None
    return where.generations / manifest.generation, manifest


def test_every_directory_of_a_generation_is_known(generation: tuple[Path, Manifest]) -> None:
    gen, manifest = generation
    names = sorted(p.name for p in gen.iterdir())
    assert {"data", "include", "bin"} <= set(names), names  # the wheel's .data went there
    cache = gen / "overlay" / "datapkg" / "__pycache__"
    cache.mkdir(exist_ok=True)  # kvenv's own bytecode (kvenv.env.bytecode) may be there
    (cache / "__init__.cpython-311.opt-1.pyc").write_bytes(b"byte code")
    (cache / "__init__.cpython-311.opt-2.pyc").write_bytes(b"byte code")
    assert stray_files(manifest) == []


@pytest.mark.parametrize(
    "added",
    [
        "data/share/datapkg/extra.txt",
        "include/evil.h",
        "bin/datatool2",
        "overlay/datapkg/__pycache__/other.cpython-311.pyc",
        "lib/added.py",
    ],
)
def test_an_added_file_in_any_directory_is_found_and_only_it_removed(
    generation: tuple[Path, Manifest], added: str
) -> None:
    gen, manifest = generation
    path = gen / added
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("added\n")
    before = sorted(p for p in gen.rglob("*") if p != path)
    # a directory of its own at the generation's top is one entry: the directory
    reported = str(gen / "lib") if added.startswith("lib/") else str(path)
    assert stray_files(manifest) == [reported]
    assert remove_strays(manifest) == [reported]
    assert not path.exists() and stray_files(manifest) == []
    after = sorted(gen.rglob("*"))
    made_for_it = [p for p in before if p not in after]
    assert all(path.is_relative_to(p) for p in made_for_it), made_for_it  # only its own dirs


@pytest.mark.parametrize("kind", ["sitecustomize", "pth", "link", "module-in-package"])
def test_kvenv_lib_holds_only_the_files_its_listing_names(
    generation: tuple[Path, Manifest], kind: str
) -> None:
    """kvenv-lib (a copy of kvenv from its sealed store entry) is last on every activated
    process's PYTHONPATH: the files its listing names pass, and Python's own byte code of them;
    anything else in it is an added file, found and removed, and the copy stays."""
    gen, manifest = generation
    lib = gen / "kvenv-lib"
    assert manifest.kvenv_lib is not None
    init = lib / "kvenv" / "__init__.py"
    assert init.is_file() and not init.is_symlink()
    own = lib / "kvenv" / "__pycache__" / "__init__.cpython-311.pyc"
    own.parent.mkdir(exist_ok=True)
    own.write_bytes(b"python's own")  # beside a listed module: not added
    if kind == "sitecustomize":
        added = lib / "sitecustomize.py"
        added.write_text("print('owned')\n")
    elif kind == "pth":
        added = lib / "zz.pth"
        added.write_text("import os\n")
    elif kind == "link":
        added = lib / "sitecustomize"
        added.symlink_to(gen / "overlay" / "helper", target_is_directory=True)
    else:
        added = lib / "kvenv" / "evil.py"
        added.write_text("X = 1\n")
    assert stray_files(manifest) == [str(added)]
    assert remove_strays(manifest) == [str(added)]
    assert stray_files(manifest) == []
    assert init.is_file() and own.is_file()
