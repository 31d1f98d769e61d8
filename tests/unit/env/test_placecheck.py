"""kvenv.env.placecheck: which roots and caches are refused, on real directories (a root with
its marker, a cache with a sealed store entry, a virtual environment with ``pyvenv.cfg``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kvenv.env.placecheck import host_places, kvenv_place_of, misplaced
from kvenv.env.store import MARKER

CASES = {
    # case: (root, cache, expected (which, words in the problem) or None)
    "apart": ("roots/a", "caches/c", None),
    "root inside another root": ("other-root/sub", "caches/c", ("root", "kvenv runtime root")),
    "root inside a cache": ("old-cache/x", "caches/c", ("root", "kvenv cache")),
    "root inside a store entry": (
        "old-cache/store/" + "a" * 64 + "/x",
        "caches/c",
        ("root", "kvenv store entry"),
    ),
    "root inside the venv": (
        "venv/lib/root",
        "caches/c",
        ("root", "inside the host's Python installation"),
    ),
    "root containing the venv": (
        ".",
        "../outside-cache",
        ("root", "contains the host's Python installation"),
    ),
    "root inside a site dir": ("site/site-packages/r", "caches/c", ("root", "inside the host's")),
    "cache inside the venv": ("roots/a", "venv/cache", ("cache", "inside the host's")),
    "cache inside another root": ("roots/a", "other-root/c", ("cache", "kvenv runtime root")),
    "root is the cache": ("caches/c", "caches/c", ("root", "same directory as the cache")),
    "root inside its cache": ("caches/c/r", "caches/c", ("root", "inside the cache")),
    "cache inside its root": ("roots/a", "roots/a/c", ("cache", "inside the runtime root")),
}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """Another root, an old cache with a sealed store entry, a virtual environment and a
    site directory, as they are on disk."""
    (tmp_path / "other-root").mkdir()
    (tmp_path / "other-root" / ".kvenv-root").write_text("{}")
    entry = tmp_path / "old-cache" / "store" / ("a" * 64)
    entry.mkdir(parents=True)
    (entry / MARKER).write_text("{}")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "site" / "site-packages").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_misplaced_roots_and_caches(world: Path, case: str) -> None:
    root, cache, expected = CASES[case]
    host = host_places(
        str(world / "venv" / "bin" / "python"), [str(world / "site" / "site-packages")]
    )
    assert str(world / "venv") in host and str(world / "site" / "site-packages") in host
    found = misplaced(os.path.realpath(world / root), os.path.realpath(world / cache), host)
    if expected is None:
        assert found is None
        return
    assert found is not None, case
    which, problem, _ = found
    assert which == expected[0] and expected[1] in problem, found


def test_what_a_directory_is(world: Path) -> None:
    assert kvenv_place_of(str(world / "other-root")) == "runtime root"
    assert kvenv_place_of(str(world / "old-cache")) == "cache"
    assert kvenv_place_of(str(world / "old-cache" / "store")) == "store"
    assert kvenv_place_of(str(world / "venv")) is None


def test_host_places_never_hold_the_filesystem_root(tmp_path: Path) -> None:
    found = host_places("/python3", ["/site-packages", "/usr/lib/python3/dist-packages", "/x/src"])
    assert "/" not in found and "/x/src" not in found
    assert os.path.realpath(sys.prefix) in found
    assert os.path.realpath("/usr/lib/python3/dist-packages") in found


def test_the_filesystem_root_as_runtime_root_gets_a_fix_that_can_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--root /`` is refused as a root that can never be one (not as "cache inside the
    runtime root /" with "give --cache DIR", which no cache can satisfy); ``status --root /``
    does not suggest ``apply --root /``; a root that holds the cache names both fixes."""
    from kvenv.cli import main

    monkeypatch.chdir(tmp_path)
    cache = ["--cache", str(tmp_path / "cache")]
    assert main(["apply", "demo", "--root", "/", *cache]) == 3
    error = capsys.readouterr().err
    assert "refusing the runtime root / (from --root): it is the filesystem root" in error
    assert "give another --root DIR" in error and "--cache" not in error
    assert main(["status", "demo", "--root", "/", *cache]) == 0
    text = capsys.readouterr().out
    assert "apply demo --root /" not in text and "can never be a runtime root" in text
    assert main(["apply", "demo", "--root", str(tmp_path), "--cache", str(tmp_path / "c")]) == 3
    error = capsys.readouterr().err
    assert "inside the runtime root" in error
    assert f"give another --cache DIR outside {tmp_path}" in error
    assert "a runtime root that does not hold the cache (give another --root DIR)" in error
    assert misplaced("/", str(tmp_path), []) == (
        "root",
        "is the filesystem root: a runtime root must be a directory of its own",
        "/",
    )
