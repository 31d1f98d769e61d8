"""``-q/--quiet`` and ``-v/--verbose`` on every command: quiet drops notes and progress and
nothing else; verbose says where the profile, root and cache came from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from kvenv.cli import _io, build_parser, main


def _parsers(parser: argparse.ArgumentParser, name: str = "kvenv") -> list[tuple[str, Any]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found.append((f"{name} {sub_name}", sub))
                found += _parsers(sub, f"{name} {sub_name}")
    return found


def test_every_command_has_both_flags() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) > 25
    for name, parser in parsers:
        for flag in ("-q", "--quiet", "-v", "--verbose"):
            assert flag in parser._option_string_actions, f"{name} lacks {flag}"


def test_quiet_drops_notes_and_progress_only(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        _io.VERBOSITY = -1
        _io.out("note: informational")
        _io.err("note: informational")
        _io.out("result")
        _io.err("warning: kept")
        _io.detail("resolved")
        assert not _io.TerminalProgress("fetching", enabled=True).enabled
        captured = capsys.readouterr()
        assert captured.out == "result\n" and captured.err == "warning: kept\n"
        _io.VERBOSITY = 1
        _io.detail("resolved")
        _io.out("note: shown")
        captured = capsys.readouterr()
        assert captured.err == "kvenv: resolved\n" and captured.out == "note: shown\n"
    finally:
        _io.VERBOSITY = 0


def test_flags_through_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.applyenv import local_project

    project = local_project(tmp_path / "proj")
    args = ["generations", str(project.profile_path), "--root", str(tmp_path / "r")]
    assert main([*args, "--verbose"]) == 0
    err = capsys.readouterr().err
    assert f"kvenv: runtime root: {tmp_path / 'r'} (from --root)" in err
    assert f"kvenv: profile t: {project.profile_path}" in err
    assert main([*args, "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert _io.VERBOSITY == -1
    assert main([*args]) == 0  # each command sets its own level
    assert _io.VERBOSITY == 0
    assert main([*args, "-q", "-v"]) == 2  # one or the other
    capsys.readouterr()
