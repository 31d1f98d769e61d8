"""``kvenv validate`` of a profile that validated before answers from its facts record
(kvenv.model.facts) without loading it: byte for byte what loading prints, and never once a
file that decides the answer has changed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import kvenv.model.loading
from kvenv._util.memo import LAYOUT
from kvenv.cli import main

FACTS_DIR = f"{LAYOUT}/profile-facts"

PARENT = 'schema = 1\nname = "base"\ndescription = "parent"\n[runtime]\ndtype = "float16"\n'
CHILD = 'schema = 1\nname = "child"\nextends = "base"\ndescription = "child"\n'
Said = tuple[int, str, str]


class Loads:
    """``load_profile`` counted: how many profiles were loaded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = kvenv.model.loading.load_profile

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(kvenv.model.loading, "load_profile", counted)

    def take(self) -> int:
        calls, self.calls = self.calls, 0
        return calls


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    profiles = tmp_path / "proj" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "base.toml").write_text(PARENT)
    (profiles / "child.toml").write_text(CHILD)
    (profiles / "broken.toml").write_text(
        'schema = 1\nname = "broken"\n[runtime]\ngpu_memory_utilization = 7\n'
    )
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    return profiles


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Said:
    capsys.readouterr()
    code = main(argv)
    said = capsys.readouterr()
    return code, said.out, said.err


CASES = {
    "one": ["validate", "child"],
    "several": ["validate", "child", "base", "broken", "missing", "demo"],
    "a path": ["validate", "profiles/child.toml"],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_repeat_is_answered_from_the_records_byte_for_byte(
    project: Path,
    tmp_path: Path,
    case: str,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*CASES[case], *(["--json"] if as_json else [])]
    loads = Loads(monkeypatch)
    full = _run(argv, capsys)
    valid = len([r for r in argv[1:] if r not in ("broken", "missing", "--json")])
    assert loads.take() == len(argv[1:]) - as_json
    quick = _run(argv, capsys)
    assert quick == full
    assert loads.take() == len(argv[1:]) - as_json - valid  # only the failures loaded again
    shutil.rmtree(tmp_path / "cache" / FACTS_DIR)
    assert _run(argv, capsys) == full


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_default_profile_is_answered_from_its_record(
    project: Path,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KVENV_PROFILE", "child")
    argv = ["validate", *(["--json"] if as_json else [])]
    loads = Loads(monkeypatch)
    full = _run(argv, capsys)
    assert full[0] == 0 and "child" in full[1] and loads.take() == 1
    assert _run(argv, capsys) == full and loads.take() == 0
    monkeypatch.setenv("KVENV_PROFILE", "base")  # another default: another record
    other = _run(argv, capsys)
    assert "base" in other[1] and loads.take() == 1


def test_the_built_in_default_is_answered_from_its_record_as_text(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    loads = Loads(monkeypatch)
    full = _run(["validate"], capsys)
    assert full[0] == 0 and loads.take() == 1
    assert _run(["validate"], capsys) == full and loads.take() == 0
    as_json = _run(["validate", "--json"], capsys)  # the same record answers --json
    assert as_json[0] == 0 and loads.take() == 0
    assert '"ref": "kaggle-t4x2-cu128"' in as_json[1]


def _break_child(profiles: Path) -> None:
    (profiles / "child.toml").write_text(CHILD + "[runtime]\ngpu_memory_utilization = 7\n")


def _break_parent(profiles: Path) -> None:
    (profiles / "base.toml").write_text(PARENT.replace('"float16"', "16"))


def _shadow_parent(profiles: Path) -> None:
    """The parent's name found first somewhere else: it is another, invalid file."""
    (profiles / "child.toml").write_text(CHILD.replace('"base"', '"other"'))


def _remove_parent(profiles: Path) -> None:
    (profiles / "base.toml").unlink()


EDITS = {
    "child made invalid": _break_child,
    "parent made invalid": _break_parent,
    "extends another": _shadow_parent,
    "parent removed": _remove_parent,
}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_edit_is_noticed_with_the_record_present(
    project: Path,
    tmp_path: Path,
    edit: str,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["validate", "child", *(["--json"] if as_json else [])]
    assert _run(argv, capsys)[0] == 0
    loads = Loads(monkeypatch)
    assert _run(argv, capsys)[0] == 0 and loads.take() == 0
    EDITS[edit](project)
    with_record = _run(argv, capsys)
    assert with_record[0] in (1, 2) and loads.take() == 1
    shutil.rmtree(tmp_path / "cache" / FACTS_DIR)
    assert _run(argv, capsys) == with_record


def test_a_profile_of_the_same_name_earlier_on_the_search_path_is_noticed(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``$KVENV_PROFILE_PATH`` changed: a name may now resolve to another file."""
    argv = ["validate", "demo"]
    builtin = _run(argv, capsys)
    assert builtin[0] == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(elsewhere))
    assert _run(argv, capsys)[0] == 0
    (elsewhere / "demo.toml").write_text('schema = 1\nname = "demo"\n[runtime]\ndtype = 3\n')
    code, out, _ = _run(argv, capsys)
    assert code == 1 and "invalid" in out and str(elsewhere / "demo.toml") in out


def test_a_failure_is_never_recorded(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["validate", "broken", "missing"], capsys)[0] == 2
    assert not list((tmp_path / "cache" / FACTS_DIR).glob("*.json"))
    assert _run(["validate", "child"], capsys)[0] == 0
    assert len(list((tmp_path / "cache" / FACTS_DIR).glob("*.json"))) == 1


def test_a_blank_cache_variable_is_no_error(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KVENV_CACHE_DIR", " ")
    loads = Loads(monkeypatch)
    for _ in range(2):
        code, out, _ = _run(["validate", "child"], capsys)
        assert code == 0 and out.startswith("valid")
    assert loads.take() == 2  # nowhere to keep a record: loaded each time
