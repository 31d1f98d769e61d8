"""Bad input, one message (issue 23): each kind of bad input the issue names is one message with
the file and the ``$.path`` of the field, exit 2, also under ``--json`` (one JSON object on
stdout, nothing on stderr), never a traceback; and the command-line and lock cases beside them
(global options before the command, every unmet requirement of a lock in one run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvenv._util.nesting import MAX_DEPTH
from kvenv._util.resources import data_dir
from kvenv.cli import main
from tests.support.clienv import isolated_cli_dir
from tests.support.lockenv import HOST_TORCH, basic_house, isolate_index_env, write_project

DEEP = 1000  # far past both the documented limit and what the parsers' recursion allows


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated CLI directory with a project copy of the built-in ``demo`` and its lock."""
    isolated_cli_dir(tmp_path, monkeypatch)
    (tmp_path / "profiles" / "broken.toml").unlink()
    shutil.copy(data_dir("profiles") / "demo.toml", tmp_path / "profiles" / "demo.toml")
    (tmp_path / "locks").mkdir()
    shutil.copy(data_dir("locks") / "pylock.demo.toml", tmp_path / "locks" / "pylock.demo.toml")
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run([*argv, "--json"], capsys)
    assert err == "", err
    document: dict[str, Any] = json.loads(out)
    return code, document


def deep_path(prefix: str, step: str, depth: int) -> str:
    """The ``$.path`` of the first container at depth ``MAX_DEPTH + 1``, below ``prefix`` (a
    container at ``depth``) by repeated ``step``s."""
    return prefix + step * (MAX_DEPTH + 1 - depth)


# -- 1. nesting deeper than the documented limit ---------------------------------------------


def _deep_profile(root: Path) -> tuple[list[str], Path, str]:
    path = root / "profiles" / "deep.toml"
    body = "{a = " * DEEP + "1" + "}" * DEEP
    path.write_text(f'schema = 1\nname = "deep"\nx = {body}\n')
    return ["show", "deep"], path, deep_path("$.x", ".a", 2)


def _deep_dotted_profile(root: Path) -> tuple[list[str], Path, str]:
    # nested by dotted keys: no recursion in the parser, deep all the same
    path = root / "profiles" / "dotted.toml"
    path.write_text('schema = 1\nname = "dotted"\n' + ".".join(["a"] * DEEP) + " = 1\n")
    return ["show", "dotted"], path, deep_path("$.a", ".a", 2)


def _deep_lock(root: Path) -> tuple[list[str], Path, str]:
    path = root / "locks" / "pylock.demo.toml"
    with path.open("a") as stream:
        stream.write("\n[tool.x]\ny = " + "[" * DEEP + "]" * DEEP + "\n")
    return ["plan", "demo"], path, deep_path("$.tool.x.y", "[0]", 4)


def _deep_snapshot(root: Path) -> tuple[list[str], Path, str]:
    path = root / "host.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return ["plan", "demo", "--host", str(path)], path, deep_path("$", "[0]", 1)


def _deep_snapshot_objects(root: Path) -> tuple[list[str], Path, str]:
    # deep, yet shallow enough for json to parse: the limit, not the parser, refuses it
    path = root / "host.json"
    path.write_text('{"a": ' * (MAX_DEPTH + 5) + "1" + "}" * (MAX_DEPTH + 5))
    return ["plan", "demo", "--host", str(path)], path, deep_path("$.a", ".a", 2)


@pytest.mark.parametrize(
    "make",
    [_deep_profile, _deep_dotted_profile, _deep_lock, _deep_snapshot, _deep_snapshot_objects],
    ids=["profile", "profile-dotted-keys", "pylock-tool-table", "snapshot-arrays", "snapshot"],
)
def test_nesting_deeper_than_the_limit_is_one_message(
    project: Path, make: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, path, where = make(project)
    code, _out, err = run(argv, capsys)
    assert code == 2, err
    assert f"{path}: {where}: nested deeper than {MAX_DEPTH}" in err, err
    code, document = run_json(argv, capsys)
    assert code == 2 and document["code"] == 2
    (problem,) = document["problems"]
    assert (problem["file"], problem["path"]) == (str(path), where)
    assert str(MAX_DEPTH) in problem["fix"]


def test_state_readers_treat_a_deep_file_as_damaged_not_a_crash(tmp_path: Path) -> None:
    """The pointer and manifest of a root: the full readers give one message naming the file
    and the ``$.path``."""
    from kvenv.env.manifest import read_manifest
    from kvenv.env.root import read_pointer
    from kvenv.errors import InputError

    root = tmp_path / "root"
    root.mkdir()
    (root / "current.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError) as pointer:
        read_pointer(root)
    assert str(root / "current.json") in pointer.value.render()
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"a": ' * DEEP + "{}" + "}" * DEEP)
    with pytest.raises(InputError) as error:
        read_manifest(manifest)
    (problem,) = error.value.problems
    assert (problem.file, problem.path) == (str(manifest), deep_path("$.a", ".a", 2))


# -- 2. one broken file does not break `kvenv profiles` --------------------------------------

BROKEN: dict[str, tuple[str, str]] = {
    # name: (file text, what its one-line reason says)
    "deep": ('schema = 1\nname = "deep"\nx = ' + "[" * DEEP + "]" * DEEP, "nested deeper"),
    "syntax": ('schema = 1\nname = "syntax"\nx = \n', "Invalid value"),
    "selfie": ('schema = 1\nname = "selfie"\nextends = "selfie"\n', "extends itself"),
    "lookalike": ('schema = 1\nname = "lookalike"\n[host]\nprotected = ["t\u03bfrch"]\n', "U+03BF"),
    "empty": ("", "empty"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_profile_is_listed_as_invalid_and_the_others_still_listed(
    project: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text, reason = BROKEN[name]
    (project / "profiles" / f"{name}.toml").write_text(text, encoding="utf-8")
    code, out, err = run(["profiles"], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "invalid" in rows[name] and reason in rows[name], rows[name]
    assert "invalid" not in rows["demo"] and "invalid" not in rows["colab-gpu"]
    code, document = run_json(["profiles"], capsys)
    listed = {row["name"]: row for row in document["profiles"]}
    assert code == 0 and listed["demo"]["valid"] and not listed[name]["valid"]
    assert reason in listed[name]["problem"]


@pytest.mark.parametrize(
    ("stem", "says"),
    [("Demo", "is not a profile name"), ("d\u0435mo", "U+0435 CYRILLIC SMALL LETTER IE")],
    ids=["uppercase", "lookalike"],
)
def test_a_file_that_cannot_name_a_profile_is_listed_as_invalid(
    project: Path, stem: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never found by its name, so never loaded: listed, not silently skipped."""
    (project / "profiles" / f"{stem}.toml").write_text('schema = 1\nname = "x"\n')
    code, document = run_json(["profiles"], capsys)
    listed = {row["name"]: row for row in document["profiles"]}
    assert code == 0 and listed["demo"]["valid"]
    assert not listed[stem]["valid"] and says in listed[stem]["problem"]


# -- 3. messages of their own ----------------------------------------------------------------


def _self_extends(root: Path) -> tuple[list[str], Path, str, str]:
    path = root / "profiles" / "selfie.toml"
    path.write_text('schema = 1\nname = "selfie"\nextends = "selfie"\n')
    return ["show", "selfie"], path, "$.extends", "extends itself"


def _lookalike_protected(root: Path) -> tuple[list[str], Path, str, str]:
    path = root / "profiles" / "homo.toml"
    text = 'schema = 1\nname = "homo"\nextends = "demo"\n[host]\nprotected = ["t\u03bfrch"]'
    path.write_text(text, encoding="utf-8")
    return ["show", "homo"], path, "$.host.protected[0]", "U+03BF GREEK SMALL LETTER OMICRON"


def _lookalike_name(root: Path) -> tuple[list[str], Path, str, str]:
    path = root / "profiles" / "named.toml"
    path.write_text('schema = 1\nname = "d\u0435mo"\nextends = "demo"\n', encoding="utf-8")
    return ["show", "named"], path, "$.name", "U+0435 CYRILLIC SMALL LETTER IE"


def _empty_shadow(root: Path) -> tuple[list[str], Path, str, str]:
    path = root / "profiles" / "colab-gpu.toml"
    path.write_text("")  # as `kvenv show colab-gpu --toml > profiles/colab-gpu.toml` leaves it
    return ["show", "colab-gpu"], path, "$", "shadows the built-in profile 'colab-gpu'"


@pytest.mark.parametrize(
    "make",
    [_self_extends, _lookalike_protected, _lookalike_name, _empty_shadow],
    ids=["self-extends", "lookalike-protected", "lookalike-name", "empty-shadowing-builtin"],
)
def test_each_mistake_gets_its_own_message(
    project: Path, make: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, path, where, says = make(project)
    code, _out, err = run(argv, capsys)
    assert code == 2 and says in err and f"{path}: {where}: " in err, err
    assert "not found" not in err and "required key is missing" not in err
    code, document = run_json(argv, capsys)
    assert code == 2
    (problem,) = document["problems"]
    assert (problem["file"], problem["path"]) == (str(path), where)
    assert says in document["message"] + problem["message"]


def test_the_empty_file_message_says_how_to_fix_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "profiles" / "colab-gpu.toml"
    _empty_shadow(project)
    _code, document = run_json(["show", "colab-gpu"], capsys)
    (problem,) = document["problems"]
    assert f"delete {path}" in problem["fix"] and "> colab-gpu.new.toml" in problem["fix"]


@pytest.mark.parametrize("where", ["profile", "lock"])
def test_a_leading_utf8_bom_is_accepted(
    project: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The choice made: one BOM at the very start is skipped (TOML 1.0 asks for a UTF-8
    document; a BOM is UTF-8's signature, and editors on Windows write one)."""
    path = project / ("profiles/demo.toml" if where == "profile" else "locks/pylock.demo.toml")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    argv = ["show", "demo"] if where == "profile" else ["lock", "demo", "--check"]
    code, _out, err = run(argv, capsys)
    assert code == 0, err


def test_a_leading_utf8_bom_is_accepted_in_a_host_snapshot(tmp_path: Path) -> None:
    from kvenv.model.snapshot import read_snapshot

    source = data_dir("profiles") / "kaggle-t4x2-cu128.host.json"
    path = tmp_path / "host.json"
    path.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    assert read_snapshot(path) == read_snapshot(source)


def test_a_lookalike_profile_name_on_the_command_line_names_the_code_point(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = run_json(["show", "d\u0435mo"], capsys)
    assert code == 2 and "U+0435 CYRILLIC SMALL LETTER IE" in document["message"]


# -- 4. global options before the command ----------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["-q", "status", "demo"], ["status", "demo", "-q"]),
        (["--quiet", "status", "demo"], ["status", "demo", "--quiet"]),
        (["-v", "status", "demo"], ["status", "demo", "-v"]),
        (["--json", "status", "demo"], ["status", "demo", "--json"]),
        (["--json", "-q", "validate", "demo"], ["validate", "demo", "--json", "-q"]),
        # (cache verify of a cache that does not exist is exit 2: prune says so, exit 0)
        (["--json", "cache", "prune", "--dry-run"], ["cache", "prune", "--dry-run", "--json"]),
        (["-v", "profiles"], ["profiles", "-v"]),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_global_options_are_accepted_before_the_command(
    project: Path, before: list[str], after: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    expected = run(after, capsys)
    assert expected[0] == 0, expected
    assert run(before, capsys) == expected


def test_an_option_before_the_command_that_it_lacks_is_still_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = run_json(["schema", "profile"], capsys)  # `schema` has no --json
    assert code == 2 and document["error"] == "UsageError"
    code, document = run_json(["-q", "schema", "profile"], capsys)
    assert code == 2 and document["error"] == "UsageError"


def test_run_keeps_options_after_the_double_dash_for_the_command(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Moved after the command, a leading ``-q`` never lands after ``--``: ``run``'s command
    keeps its own ``-q`` and kvenv's stays kvenv's."""
    from kvenv.cli import _after_command, build_parser

    parser = build_parser("run")
    moved = _after_command(parser, ["run", "demo", "--", "grep", "-q", "x"], ["-q"])
    assert moved == ["run", "-q", "demo", "--", "grep", "-q", "x"]
    moved = _after_command(build_parser("cache"), ["cache", "verify"], ["--json"])
    assert moved == ["cache", "verify", "--json"]


# -- 5. a lock lists every requirement nothing can meet, in one run ---------------------------

UNMET: dict[str, tuple[tuple[str, ...], list[str], tuple[str, ...]]] = {
    # case: (protected, what the native wheel requires besides torch and alpha, unmet names)
    "missing-protected": (
        ("torch", "torchvision", "torchaudio", "triton"),
        ["torchaudio", "torchvision==0.25.0", "triton>=3"],
        ("torchaudio", "torchvision", "triton"),
    ),
    "protected-wrong-version-and-missing": (
        ("torch", "torchvision", "torchaudio"),
        ["torchaudio", "torch>=2.11"],
        ("torch", "torchaudio"),
    ),
    "no-source-has-them": (
        ("torch", "torchvision", "torchaudio"),
        ["nosuch-one", "nosuch-two", "torchvision"],
        ("nosuch-one", "nosuch-two", "torchvision"),
    ),
}


@pytest.mark.parametrize("case", sorted(UNMET))
def test_lock_reports_every_unmet_requirement_with_its_fix(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    protected, extra, unmet = UNMET[case]
    root = tmp_path / "p"
    isolate_index_env(monkeypatch, tmp_path / "cache")
    write_project(
        root,
        distributions=[HOST_TORCH],
        protected=protected,
        native_requires=["torch==2.10.0", "alpha>=1.0", *extra],
    )
    basic_house(root / "house")
    monkeypatch.chdir(root)
    argv = ["lock", "testbox", "--find-links", "house", "--no-index"]
    code, _out, err = run(argv, capsys)
    assert code == 3, err
    for name in unmet:
        assert f"  - {name}: " in err, err
    code, document = run_json(argv, capsys)
    assert code == 3 and document["error"] == "ConflictError"
    problems = {p["path"].removeprefix("$."): p for p in document["problems"]}
    assert sorted(problems) == sorted(unmet)
    for name, problem in problems.items():
        assert "waive" in problem["fix"] and f'name = "{name}"' in problem["fix"], problem
    assert not (root / "locks" / "pylock.testbox.toml").exists()


def test_lock_with_one_unmet_requirement_keeps_its_message_and_adds_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvenv.errors import ConflictError
    from kvenv.lock.engine import LockOptions, lock_profile
    from kvenv.lock.sources import IndexConfig

    isolate_index_env(monkeypatch, tmp_path / "cache")
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "torchaudio"]
    )
    house = basic_house(tmp_path / "house")
    options = LockOptions(
        index=IndexConfig(find_links=(str(house),), no_index=True), cache_dir=tmp_path / "cache"
    )
    with pytest.raises(ConflictError) as info:
        lock_profile(loaded, options)
    assert "torchaudio is protected and the host snapshot does not list it" in info.value.message
    (problem,) = info.value.problems
    assert problem.fix is not None and "waive" in problem.fix
