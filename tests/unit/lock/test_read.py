"""Reading a lock refuses what pylock allows but kvenv never uses: a sha256 that is not 64
lowercase hex digits, a non-https URL, a wheel path that is absolute or leaves the project
directory, and a package listed twice. One message names the lock file, the ``$.path`` of
each bad field and the fix; ``kvenv plan`` and ``kvenv apply`` exit 2 and write nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvenv.errors import LockError
from kvenv.lock.pylock import read_lock
from kvenv.model.locations import Locations
from tests.support.applyenv import Project, locations, standard_project
from tests.support.hardening import run_cli, tree_state
from tests.support.wheels import sha256_of

WHEEL = "$.packages[0].wheels[0]"


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _sha(transform: Callable[[str], str]) -> Callable[[Project], None]:
    def edit(p: Project) -> None:
        digest = sha256_of(p.overlay[0])
        _sub(p.lock_path, digest, transform(digest))

    return edit


def _path(new: str) -> Callable[[Project], None]:
    return lambda p: _sub(p.lock_path, f'path = "../wheels/{p.overlay[0].name}"', new)


def _duplicate(p: Project) -> None:
    text = p.lock_path.read_text()
    start, end = text.index("[[packages]]"), text.index("[tool.kvenv]")
    p.lock_path.write_text(text[:end] + text[start:end] + text[end:])


CASES: dict[str, tuple[Callable[[Project], None], str, str]] = {
    "sha-upper": (_sha(str.upper), f"{WHEEL}.hashes.sha256", "64 lowercase hex"),
    "sha-short": (_sha(lambda d: d[:12]), f"{WHEEL}.hashes.sha256", "is not a sha256"),
    "http-url": (
        _path('url = "http://example.invalid/helper-2.0-py3-none-any.whl"'),
        f"{WHEEL}.url",
        "only https:// URLs are allowed",
    ),
    "ftp-url": (
        _path('url = "ftp://example.invalid/helper-2.0-py3-none-any.whl"'),
        f"{WHEEL}.url",
        "only https:// URLs are allowed",
    ),
    "absolute-path": (
        _path('path = "/etc/helper-2.0-py3-none-any.whl"'),
        f"{WHEEL}.path",
        "absolute",
    ),
    "two-levels-up": (
        _path('path = "../../wheels/helper-2.0-py3-none-any.whl"'),
        f"{WHEEL}.path",
        "leaves the project directory",
    ),
    "hidden-traversal": (
        _path('path = "../wheels/../../../etc/helper-2.0-py3-none-any.whl"'),
        f"{WHEEL}.path",
        "leaves the project directory",
    ),
    # the lock lists helper and the native (nativepkg): helper's copy is $.packages[2]
    "duplicate": (_duplicate, "$.packages[2].name", "listed twice"),
}


def _paths(where: Locations) -> list[str]:
    return ["--root", str(where.root), "--cache", str(where.cache)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_read_lock_refuses(tmp_path: Path, case: str) -> None:
    project = standard_project(tmp_path / "proj")
    edit, path, message = CASES[case]
    edit(project)
    with pytest.raises(LockError) as info:
        read_lock(project.lock_path)
    text = info.value.render()
    assert str(project.lock_path) in text
    assert f"{path}: " in text and message in text, text
    assert "kvenv lock" in text


@pytest.mark.parametrize("case", ["sha-upper", "http-url", "two-levels-up", "duplicate"])
def test_plan_and_apply_refuse_before_writing(tmp_path: Path, case: str) -> None:
    project = standard_project(tmp_path / "proj")
    CASES[case][0](project)
    before = tree_state(tmp_path / "proj")
    where = locations(tmp_path)
    for args in (
        ["plan", str(project.profile_path)],
        ["apply", str(project.profile_path), *_paths(where)],
    ):
        result = run_cli(args)
        assert result.code == 2, result.text
        assert result.err.startswith("kvenv: error: invalid lock:"), result.err
        assert CASES[case][1] in result.err and "Traceback" not in result.text
    assert tree_state(tmp_path / "proj") == before
    assert not where.root.exists() and not where.cache.exists()


def test_the_portable_form_and_a_subdirectory_are_accepted(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    lock = read_lock(project.lock_path)
    assert lock.pylock.packages[0].wheels is not None
    assert str(lock.pylock.packages[0].wheels[0].path).startswith("../wheels/")
    _path('path = "../wheels/sub/../helper-2.0-py3-none-any.whl"')(project)
    read_lock(project.lock_path)
