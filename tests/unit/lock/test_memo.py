"""An offline lock of unchanged inputs is a lookup (kvenv.lock.memo), with the same output as
resolving; any input that changes makes it resolve again; online locks never use it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kvenv.lock.engine
from kvenv._util import memo
from kvenv.cli import main
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    serve_index,
    write_project,
)
from tests.support.wheels import build_wheel

MEMO_DIR = f"{memo.LAYOUT}/lock-result"


class Counter:
    """``lock_profile`` counted: how many offline locks really resolved."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = kvenv.lock.engine.lock_profile

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(kvenv.lock.engine, "lock_profile", counted)


@pytest.fixture
def project(tmp_path: Path) -> tuple[list[str], Path]:
    """A profile locked once online (a loopback index); the offline argv and the lock."""
    house = basic_house(tmp_path / "house")
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    argv = ["lock", str(loaded.path), "--cache-dir", str(tmp_path / "cache")]
    with serve_index(house) as url:
        assert main([*argv, "--index-url", url]) == 0
        offline = [*argv, "--index-url", url, "--offline"]
    return offline, loaded.lock_path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    capsys.readouterr()
    assert main(argv) == 0
    said = capsys.readouterr()
    return said.out, said.err


def test_an_unchanged_offline_lock_is_a_lookup_with_the_same_output(
    project: tuple[list[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, lock = project
    counter = Counter(monkeypatch)
    resolved = _run(argv, capsys)
    resolved_json = json.loads(_run([*argv, "--json"], capsys)[0])
    assert counter.calls == 1  # --json is another output of the same key: kept by the first
    before = lock.read_bytes()
    counter.calls = 0
    assert _run(argv, capsys) == resolved
    assert json.loads(_run([*argv, "--json"], capsys)[0]) == resolved_json
    assert counter.calls == 0
    assert lock.read_bytes() == before
    # a deleted lock is another input (the previous lock feeds the resolution): resolved again,
    # and the same lock written
    lock.unlink()
    _run(argv, capsys)
    assert counter.calls == 1 and lock.read_bytes() == before


def _touch_cache(tmp: Path) -> None:
    page = next((tmp / "cache" / "pages-v1").rglob("*.body"))
    os.utime(page, ns=(page.stat().st_atime_ns, page.stat().st_mtime_ns + 1_000_000))


def _edit_profile(tmp: Path) -> None:
    profile = next((tmp / "p" / "profiles").glob("*.toml"))
    profile.write_text(profile.read_text() + "\n# a comment changes the bytes\n")


def _add_prefer(tmp: Path) -> None:
    (tmp / "prefer.txt").write_text("alpha==0.9.0\n")


def _new_wheel_in_find_links(tmp: Path) -> None:
    build_wheel(tmp / "links", "six", "1.17.1")


CHANGES: dict[str, Callable[[Path], None]] = {
    "a cached index page": _touch_cache,
    "the profile": _edit_profile,
    "a --prefer file": _add_prefer,
    "a local find-links directory": _new_wheel_in_find_links,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_changed_input_resolves_again(
    project: tuple[list[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: str,
) -> None:
    argv, _ = project
    (tmp_path / "links").mkdir()
    argv = [
        *argv,
        "--prefer",
        str(tmp_path / "prefer.txt"),
        "--find-links",
        str(tmp_path / "links"),
    ]
    (tmp_path / "prefer.txt").write_text("")
    counter = Counter(monkeypatch)
    _run(argv, capsys)
    _run(argv, capsys)
    assert counter.calls == 1
    CHANGES[change](tmp_path)
    capsys.readouterr()
    main(argv)  # the result may differ (another preference, a broken profile): not the point
    assert counter.calls == 2, f"a changed {change} reused the kept result"


def test_a_wheel_now_at_hand_is_checked_again(
    project: tuple[list[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The protected-name check reads a locked wheel when it is in the artifact cache: a kept
    result made when it was not is not reused once it is."""
    from kvenv.fetch.cache import ArtifactCache

    argv, _ = project
    counter = Counter(monkeypatch)
    _run(argv, capsys)
    kept = next((tmp_path / "cache" / MEMO_DIR).glob("*.json"))
    looked = [Path(a) for k, a, v in json.loads(kept.read_text())["deps"] if k == "stat"]
    entries = str(ArtifactCache(tmp_path / "cache").entry("0" * 64).parent.parent)
    wheel = next(p for p in looked if str(p).startswith(entries) and p.suffix == ".whl")
    assert not wheel.exists()  # looked for, not at hand
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(b"at hand")
    capsys.readouterr()
    main(argv)
    assert counter.calls == 2


def test_online_locks_never_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    house = basic_house(tmp_path / "house")
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    argv = ["lock", str(loaded.path), "--cache-dir", str(tmp_path / "cache")]
    counter = Counter(monkeypatch)
    with serve_index(house) as url:
        _run([*argv, "--index-url", url], capsys)
        _run([*argv, "--index-url", url], capsys)
    assert counter.calls == 2
    assert not (tmp_path / "cache" / MEMO_DIR).exists()
