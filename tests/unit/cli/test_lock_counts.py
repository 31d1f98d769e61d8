"""``kvenv lock`` and ``kvenv lock --check`` count a lock's packages the same way (issue 26:
the demo's lock said "1 packages", its check "2 packages"): both count the lock's
``[[packages]]``, the native wheel's entry included, and pluralise."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support.clienv import isolated_cli_dir
from tests.support.hardening import run_cli
from tests.support.wheels import build_wheel


def _demo(directory: Path) -> Path:
    """The built-in demo's shape: native markdown-it-py 3.0.0 (a path), overlay mdurl 0.1.2."""
    wheels = directory / "wheels"
    native = build_wheel(wheels, "markdown-it-py", "3.0.0", requires=["mdurl~=0.1"])
    build_wheel(wheels, "mdurl", "0.1.2")
    (directory / "profiles" / "demo.toml").write_text(
        'schema = 1\nname = "demo"\n'
        '[target]\npython = "3.10"\nimplementation = "cpython"\nabi = "none"\n'
        '[native]\nname = "markdown-it-py"\nversion = "3.0.0"\n'
        f'sha256 = "{hashlib.sha256(native.read_bytes()).hexdigest()}"\n'
        f"size = {native.stat().st_size}\n"
        f'[native.source]\nkind = "path"\npath = "wheels/{native.name}"\n'
        '[overlay]\nlock = "locks/pylock.demo.toml"\n'
    )
    return wheels


def test_lock_and_check_say_the_same_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cli_dir(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    wheels = _demo(tmp_path)
    flags = ["--no-index", "--find-links", str(wheels), "--offline"]
    locked = run_cli(["lock", "demo", *flags])
    assert locked.code == 0, locked.text
    summary = locked.out.splitlines()[1].strip()
    assert summary.startswith("2 packages for "), summary
    assert summary.endswith(
        ": the native wheel and 1 in the overlay; 0 host assumptions; 0 shadowed host packages"
    ), summary
    again = run_cli(["lock", "demo", *flags])  # unchanged: answered from the lock's memo
    assert again.code == 0 and again.out.splitlines()[1].strip() == summary, again.text
    checked = run_cli(["lock", "demo", "--check"])
    assert checked.code == 0, checked.text
    assert "current (2 packages)" in checked.out, checked.out


def test_counts_are_pluralised() -> None:
    from kvenv.cli._io import counted

    assert [counted(n, "package") for n in (0, 1, 2)] == ["0 packages", "1 package", "2 packages"]
    assert counted(1, "host assumption") == "1 host assumption"
