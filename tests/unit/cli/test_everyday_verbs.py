"""docs/everyday.md's verb table (kvenv beside uv and pixi): every row's kvenv command is run in
a hermetic project (a local wheelhouse, ``--no-index``; the flags that make it hermetic are
appended), in the table's order, or, where it needs an applied environment, parsed by kvenv's
own parser. The completion script names every verb of the table."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.support.clienv import isolated_cli_dir
from tests.support.hardening import run_cli
from tests.support.paths import REPO
from tests.support.wheels import build_wheel

DOC = REPO / "docs" / "everyday.md"
# rows run for real, in the table's order; the rest need an applied root (tested elsewhere)
RUN = (
    "init",
    "add",
    "remove",
    "lock",
    "diff",
    "why",
    "tree",
    "export",
    "--version",
    "cache",
    "completion",
)
HERMETIC = ["--no-index", "--find-links", "wheels", "--native-requires", "native.txt"]


def rows() -> list[tuple[str, list[str]]]:
    """(task, kvenv argv) of each row of the table."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## The verbs beside uv and pixi", 1)[1].split("\n\n")[2]
    out: list[tuple[str, list[str]]] = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        command = re.fullmatch(r"`(.*)`", cells[1])
        assert command is not None, line
        shell = command.group(1)
        inner = re.fullmatch(r'eval "\$\((.*)\)"', shell)
        argv = shlex.split(inner.group(1) if inner else shell)
        assert argv[0] == "kvenv", line
        out.append((cells[0], argv[1:]))
    return out


def test_the_table_has_every_task_the_issue_names() -> None:
    tasks = {task for task, _ in rows()}
    for wanted in (
        "start a project profile",
        "add a package",
        "remove a package",
        "lock",
        "upgrade one package",
        "lock check in CI",
        "why is a package here",
        "the dependency tree",
        "export pins for another installer",
        "run one command",
        "a shell in the environment",
        "activate this shell",
        "an offline bundle",
        "which version",
        "prune the cache",
        "shell completions",
    ):
        assert wanted in tasks, wanted


@pytest.mark.parametrize(("task", "argv"), rows(), ids=[t for t, _ in rows()])
def test_each_row_parses(task: str, argv: list[str]) -> None:
    from kvenv.cli import _CommandLineError, _commands, build_parser

    parser = build_parser(argv[0])
    if argv[0] != "--version":
        assert argv[0] in _commands(parser), argv[0]
    if argv[0] == "--version":
        assert run_cli(argv).out.startswith("kvenv ")
        return
    try:
        parser.parse_args(argv)
    except _CommandLineError as exc:
        pytest.fail(f"{task}: `kvenv {shlex.join(argv)}` does not parse: {exc.message}")


def test_the_rows_run_in_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cli_dir(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "mdurl", "0.1.2")
    build_wheel(wheels, "rich", "13.7.1")
    for version in ("4.66.0", "4.67.1"):
        build_wheel(wheels, "tqdm", version)
    (tmp_path / "native.txt").write_text("mdurl~=0.1\n")  # the demo's native is on the index
    ran: list[str] = []
    for task, argv in rows():
        if argv[0] not in RUN:
            continue
        if argv[0] == "diff":  # review: the lock before this row's change, against the lock
            (tmp_path / "old.toml").write_bytes(
                (tmp_path / "locks" / "pylock.team.toml").read_bytes()
            )
        if argv[0] in ("add", "remove") or (argv[0] == "lock" and "--check" not in argv):
            argv = [*argv, *HERMETIC]
        if task == "upgrade one package":  # tqdm must be there to upgrade: pin it low first
            assert run_cli(["add", "tqdm==4.66.0", "--profile", "team", *HERMETIC]).code == 0
            assert run_cli(["add", "tqdm", "--profile", "team", *HERMETIC]).code == 0
        result = run_cli(argv)
        assert result.code == 0, f"{task}: kvenv {shlex.join(argv)}\n{result.text}"
        ran.append(task)
        if task == "add a package":
            assert "Added rich v13.7.1" in result.out
        if task == "remove a package":
            assert "Removed rich v13.7.1" in result.out
        if task == "upgrade one package":
            assert "Updated tqdm v4.66.0 -> v4.67.1" in result.out
        if task == "why is a package here":
            assert "mdurl" in result.out, result.out
        if task == "export pins for another installer":
            assert "--hash=sha256:" in result.out, result.out
        if task == "lock check in CI":
            assert result.out.startswith("ok: ")
        if task == "shell completions":
            for verb in ("add", "remove", "diff", "lock", "pin", "why", "tree", "export"):
                assert re.search(rf"\b{verb}\b", result.out), verb
    assert len(ran) >= 10, ran
