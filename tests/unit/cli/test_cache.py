"""``kvenv cache verify|prune|clean``: damage is found (exit 1, named), pruned, and a clean
cache leaves applied generations working."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from kvenv.cli import main
from tests.support.applyenv import local_project


@pytest.fixture
def applied(tmp_path: Path) -> tuple[str, list[str], Path]:
    project = local_project(tmp_path / "proj")
    cache = tmp_path / "cache"
    paths = ["--root", str(tmp_path / "root"), "--cache", str(cache)]
    assert main(["apply", str(project.profile_path), *paths]) == 0
    return str(project.profile_path), paths, cache


def _json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_verify_prune_clean(
    applied: tuple[str, list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    profile, paths, cache = applied
    cache_args = ["--cache", str(cache)]
    capsys.readouterr()
    assert main(["cache", "verify", profile, *cache_args]) == 0
    wheel = next(cache.glob("artifacts-v1/sha256/*/*/helper-*.whl"))
    before = wheel.stat()
    os.chmod(wheel, 0o644)
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))  # the cheap check trusts it
    capsys.readouterr()
    assert main(["cache", "verify", profile, *cache_args, "--json"]) == 1
    report = _json(capsys)
    assert report["ok"] is False
    assert any(str(wheel) in d["message"] for d in report["damaged"])
    assert main(["cache", "prune", profile, *cache_args, "--dry-run"]) == 0
    assert wheel.exists()
    # prune's cheap check sees a changed file only; the damage keeps size and mtime here
    assert main(["cache", "prune", profile, *cache_args]) == 0
    capsys.readouterr()
    assert main(["cache", "clean", profile, *cache_args, "--json"]) == 0
    removed = _json(capsys)["removed"]
    assert sorted(Path(p).name for p in removed) == ["artifacts-v1", "store"]
    assert not (cache / "store").exists()
    assert main(["verify", profile, *paths]) == 0  # the generation's files are hard links
    assert main(["cache", "verify", profile, *cache_args]) == 0


def _tamper_helper_entry(cache: Path) -> Path:
    """Edit a file of the helper's store entry in place; returns the entry."""
    entry = next(p for p in (cache / "store").iterdir() if (p / "site" / "helper").is_dir())
    victim = entry / "site" / "helper" / "__init__.py"
    os.chmod(victim.parent, 0o755)
    os.chmod(victim, 0o644)
    victim.write_text("V = 'tampered'\n")
    return entry


def test_the_printed_prune_command_removes_the_damage(
    applied: tuple[str, list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    profile, _, cache = applied
    entry = _tamper_helper_entry(cache)
    capsys.readouterr()
    assert main(["cache", "verify", profile, "--cache", str(cache)]) == 1
    hint = re.search(r"fix: `([^`]+)`", capsys.readouterr().out)
    assert hint is not None
    assert main(shlex.split(hint.group(1))[1:]) == 0
    assert not entry.exists()
    assert main(["cache", "verify", profile, "--cache", str(cache)]) == 0


def test_prune_removes_a_damaged_store_entry(
    applied: tuple[str, list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    profile, _, cache = applied
    entry = _tamper_helper_entry(cache)
    capsys.readouterr()
    assert main(["cache", "prune", profile, "--cache", str(cache), "--json"]) == 0
    report = _json(capsys)
    assert str(entry) in report["removed"]
    assert not entry.exists()


def test_without_a_profile_the_cache_is_the_default_one_apply_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No profile named: the default cache (the user cache here, which `apply` of a profile
    without [paths] cache used), not the default profile's [paths] cache; -v says which and
    why, and a cache that does not exist is said to (verify: exit 2), not "no damage found"."""
    for name in ("KVENV_PROFILE", "KVENV_CACHE_DIR", "KVENV_ROOT", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    user_cache = tmp_path / "home" / ".cache" / "kvenv"
    for command in ("verify", "prune", "clean"):
        code = main(["cache", command, "-v"])
        said = capsys.readouterr()
        assert f"{user_cache}" in said.out + said.err, said
        assert "does not exist" in said.out + said.err, said
        assert "no damage found" not in said.out, said
        assert code == (2 if command == "verify" else 0), said
    project = local_project(tmp_path / "proj")
    profile = str(project.profile_path)
    assert main(["apply", profile, "--root", str(tmp_path / "root")]) == 0
    assert (user_cache / "store").is_dir()
    capsys.readouterr()
    assert main(["cache", "verify", "-v"]) == 0
    said = capsys.readouterr()
    assert f"cache {user_cache}: no damage found" in said.out, said.out
    assert f"cache: {user_cache} (from the default)" in said.err, said.err
    assert "no profile named" in said.err
    assert main(["cache", "verify", "--cache", str(tmp_path / "nowhere")]) == 2
    assert "nowhere (from --cache) does not exist" in capsys.readouterr().err


def test_a_cache_that_is_a_file_is_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cache verify|prune|clean --cache FILE``: "is a file, not a directory" (exit 2), never
    "does not exist" or "nothing to remove"; the file is untouched."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for command in ("verify", "prune", "clean"):
        for profile in ([], ["demo"]):
            assert main(["cache", command, *profile, "--cache", str(afile)]) == 2
            said = capsys.readouterr().err
            assert f"the cache {afile} (from --cache) is a file, not a directory" in said, said
            assert "does not exist" not in said
    assert afile.read_text() == "mine"
