"""The hints printed around a runtime root keep the ``--root`` the user gave and have no
typos: each one, run as printed, does what it says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.support.applyenv import locations, standard_project
from tests.support.hardening import run_cli


def _hint_command(text: str, prefix: str) -> list[str]:
    found = re.search(r"`(kvenv [^`]*)`", text) if prefix == "`" else None
    if found is None:
        found = re.search(r'eval "\$\((kvenv [^)]*)\)"', text)
    assert found is not None, text
    return shlex.split(found.group(1))


def test_apply_with_root_prints_an_activate_hint_that_keeps_it(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path / "a dir")  # a space: the hint must quote
    result = run_cli(
        ["apply", str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    )
    assert result.code == 0, result.text
    argv = _hint_command(result.out, "eval")
    assert argv[:2] == ["kvenv", "activate"] and "--root" in argv
    assert argv[argv.index("--root") + 1] == str(where.root)
    again = run_cli(argv[1:])
    assert again.code == 0, again.text
    assert "PYTHONPATH" in again.out


def test_activate_without_apply_hint_has_no_typo_and_keeps_root(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    result = run_cli(["activate", str(project.profile_path), "--root", str(where.root)])
    assert result.code == 2, result.text
    assert "run `kvenv apply" in result.err, result.err
    assert not re.search(r"\S`kvenv", result.err), result.err
    argv = _hint_command(result.err, "`")
    assert argv[argv.index("--root") + 1] == str(where.root)
    assert run_cli([*argv[1:], "--cache", str(where.cache)]).code == 0
    assert run_cli(["activate", str(project.profile_path), "--root", str(where.root)]).code == 0


def test_no_hint_in_the_sources_glues_a_command_to_a_word() -> None:
    sources = Path(__file__).resolve().parents[3] / "kvenv"
    for path in sources.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"[A-Za-z]`kvenv ", line), f"{path}:{number}: {line}"
            assert 'replace(" `", "`")' not in line, f"{path}:{number}: {line}"
