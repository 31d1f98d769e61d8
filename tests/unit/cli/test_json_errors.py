"""Errors as data: with ``--json`` every error is one JSON object on stdout (``error``, ``code``,
``message``, ``problems`` with ``$.``-paths, ``hint``) and the documented exit code, nothing on
stderr; "did you mean" for commands, flags, choices and profile names; every command has a
description in ``--help``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvenv.cli import build_parser, main
from tests.support.applyenv import local_project
from tests.support.clienv import isolated_cli_dir
from tests.support.damage import damaged_bundle
from tests.support.wheels import build_wheel


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolated_cli_dir(tmp_path, monkeypatch)
    wheel = build_wheel(tmp_path, "sound", "1.0")
    wheel.rename(tmp_path / "sound-1.0-py3-none-any.whl")
    return tmp_path


def _commands_with_json() -> Iterator[list[str]]:
    """Every command and verb of the full parser that accepts ``--json``."""

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[list[str]]:
        if "--json" in parser._option_string_actions:
            yield path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk(child, [*path, name])

    yield from walk(build_parser(), [])


# (argv, exit code, error kind, a $.path some problem names or None, text the hint has or None)
CASES: list[tuple[list[str], int, str, str | None, str | None]] = [
    (["aply", "--json"], 2, "UsageError", None, "did you mean apply?"),
    (["plan", "--json", "--strct"], 2, "UsageError", None, "did you mean --strict?"),
    (["cache", "verfy", "--json"], 2, "UsageError", None, "did you mean verify?"),
    (["activate", "--shell", "json", "--manifest"], 2, "UsageError", None, None),
    (["show", "brokn", "--json"], 2, "ProfileNotReadable", None, "did you mean 'broken'?"),
    (["show", "broken", "--json"], 2, "ProfileError", "$.runtime.gpu_memory_utilization", None),
    (["lock", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (["lock", "demo", "--check", "--json", "-o", "none.toml"], 2, "LockError", None, "kvenv lock"),
    (["plan", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (["plan", "demo", "--json", "--host", "none.json"], 2, "InputError", None, None),
    (["apply", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (
        ["bootstrap", "broken", "--json"],
        2,
        "ProfileError",
        "$.runtime.gpu_memory_utilization",
        None,
    ),
    (["apply", "demo", "--json", "--from", "none"], 2, "InputError", None, None),
    (["activate", "demo", "--shell", "json"], 2, "InputError", None, "kvenv apply"),
    (["env", "demo", "--shell", "json", "--root", ""], 2, "UsageError", None, None),
    (["status", "demo", "--json", "--root", ""], 2, "UsageError", None, None),
    (["verify", "demo", "--json"], 2, "InputError", None, "kvenv apply"),
    (["reset", "demo", "--json"], 2, "UsageError", None, "--yes"),
    (["fingerprint", "--json", "--python", "/nonexistent/python"], 2, "InputError", None, None),
    (["doctor", "demo", "--json", "--host", "none.json"], 2, "InputError", None, None),
    (["doctor", "broken", "--json"], 2, "ProfileError", "$.runtime.gpu_memory_utilization", None),
    (["verify-gpus", "--json"], 2, "UsageError", None, "tensor_parallel_size"),
    (["verify-gpus", "--json", "--profile", "nope"], 2, "ProfileNotReadable", None, None),
    (["verify-wheel", "none.whl", "--json"], 2, "InputError", None, None),
    (
        ["verify-wheel", "sound-1.0-py3-none-any.whl", "--json", "--sha256", "0" * 64],
        1,
        "CheckFailed",
        None,
        None,
    ),
    (
        ["verify-wheel", "sound-1.0-py3-none-any.whl", "--json", "--sha256", "xyz"],
        2,
        "UsageError",
        None,
        None,
    ),
    (["inspect-shards", "none", "--json"], 2, "ShardError", None, None),
    (["serve", "m", "--dry-run", "--json", "--host", "0.0.0.0"], 2, "UsageError", "$.host", None),
    (["bundle", "--json"], 2, "UsageError", None, None),
    (["bundle", "nope", "-o", "out", "--json"], 2, "ProfileNotReadable", None, None),
    (["bundle", "--verify", "bundle", "--json"], 1, "CheckFailed", None, None),
    (["cache", "verify", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (["cache", "prune", "broken", "--json"], 2, "ProfileError", None, None),
    (["cache", "clean", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (["list", "nope", "--json"], 2, "ProfileNotReadable", None, None),
    (["list", "demo", "--json"], 2, "InputError", None, "kvenv apply"),
    (["generations", "brokn", "--json"], 2, "ProfileNotReadable", None, "did you mean 'broken'?"),
    (["rollback", "demo", "not-a-generation", "--json"], 2, "UsageError", None, None),
    (["cluster", "status", "--json"], 2, "UsageError", None, None),
    (["validate", "--json", "--strict"], 2, "UsageError", None, None),
    (["profiles", "--json", "extra"], 2, "UsageError", None, None),
]
CASES += [
    ([*command, "--json", "--no-such-flag"], 2, "UsageError", None, None)
    for command in _commands_with_json()
]


def _id(case: tuple[list[str], int, str, str | None, str | None]) -> str:
    return " ".join(case[0])


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_json_error_is_one_object_on_stdout(
    case: tuple[list[str], int, str, str | None, str | None],
    project: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, code, kind, path, hint = case
    if "bundle" in argv and "--verify" in argv:
        damaged_bundle(local_project(project / "proj"), project)
    assert main(argv) == code
    captured = capsys.readouterr()
    document = json.loads(captured.out)  # exactly one JSON document, nothing else
    assert list(document)[:5] == ["error", "code", "message", "problems", "hint"]
    assert document["error"] == kind and document["code"] == code
    assert isinstance(document["message"], str) and document["message"]
    for problem in document["problems"]:
        assert set(problem) >= {"path", "message", "fix"}
        assert problem["path"] is None or problem["path"].startswith("$")
    if path is not None:
        assert path in [p["path"] for p in document["problems"]]
    if hint is not None:
        assert hint in (document["hint"] or "")
    assert "Traceback" not in captured.err and "kvenv: error" not in captured.err


@pytest.mark.parametrize(
    ("raised", "code", "kind"),
    [
        (FileNotFoundError(2, "No such file or directory", "/gone"), 2, "OSError"),
        (KeyboardInterrupt(), 130, "Interrupted"),
    ],
)
def test_system_errors_are_json_too(
    raised: BaseException,
    code: int,
    kind: str,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import kvenv.cli.profiles

    def fail(args: Any) -> int:
        raise raised

    monkeypatch.setattr(kvenv.cli.profiles, "cmd_profiles", fail)
    assert main(["profiles", "--json"]) == code
    document = json.loads(capsys.readouterr().out)
    assert (document["error"], document["code"]) == (kind, code)
    assert main(["profiles"]) == code  # as text: on stderr, nothing on stdout
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("kvenv: ")


def test_without_json_errors_are_text_on_stderr_with_suggestions(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--jsno"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: kvenv plan")
    assert "unrecognized arguments: --jsno" in captured.err
    assert "hint: did you mean --json?" in captured.err
    assert main(["kaggle"]) == 2  # far from every command: no suggestion
    assert "did you mean" not in capsys.readouterr().err
    assert main(["show", "kaggle-t4x2"]) == 2
    assert "did you mean 'kaggle-t4x2-cu128'?" in capsys.readouterr().err


def _all_commands() -> Iterator[list[str]]:
    def walk(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[list[str]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield [*path, name]
                    yield from walk(child, [*path, name])

    yield from walk(build_parser(), [])


@pytest.mark.parametrize("command", list(_all_commands()), ids=" ".join)
def test_every_command_has_a_description(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    usage, _, rest = text.partition("\n\n")
    assert usage.startswith("usage: kvenv")
    description = rest.split("\n\n")[0]
    assert description and not description.startswith(("positional arguments", "options")), text


def test_schema_help_lists_the_schema_names(capsys: pytest.CaptureFixture[str]) -> None:
    from kvenv.cli.schemas import SCHEMAS

    with pytest.raises(SystemExit):
        main(["schema", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in SCHEMAS:
        assert name in text


def test_serve_without_a_gpu_names_its_own_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvenv.runtime import gpus

    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: gpus.GpuCount(0, "no GPU"))
    assert main(["serve", "m", "--dry-run", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "RuntimeNotReady"
    assert "`kvenv serve --no-gpu-check`" in error["hint"]
    import socket
    import sys

    with socket.socket() as probe:  # --dry-run runs every check of a start: the port too
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    argv = ["serve", "m", "--dry-run", "--no-gpu-check", "--json", "--port", port]
    assert main([*argv, "--vllm", sys.executable]) == 0
