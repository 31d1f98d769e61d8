"""What a killed atomic write leaves in a runtime root (``.<file>.<8 characters>.tmp`` beside
one of the root's own files) is removed by the next apply, under the root lock; a root whose
first claim was killed that way is still adopted; nothing else in the root is touched.

Found by the kill campaign (tests/hardening/test_faults.py): a SIGKILL between writing an
activation script's temporary file and renaming it left the file in the root for good."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.env.root import ATOMIC_NAMES, claim_root, is_owned, stray_temp
from kvenv.env.rootfiles import POINTER_NAME
from kvenv.env.shellrender import SHIMS
from kvenv.model.locations import ROOT_MARKER
from tests.support.applyenv import standard_project
from tests.support.hardening import run_cli


def test_the_atomic_names_are_the_root_files_kvenv_replaces() -> None:
    shims = {f"activate.{suffix}" for suffix in SHIMS}
    assert {ROOT_MARKER, POINTER_NAME, *shims} == ATOMIC_NAMES


@pytest.mark.parametrize(
    ("name", "stray"),
    [
        (".activate.ps1.btfl7u9k.tmp", True),
        (".current.json.a_b0c1d2.tmp", True),
        (f".{ROOT_MARKER}.abcdefgh.tmp", True),
        (".activate.ps1.short.tmp", False),  # not the writer's 8 characters
        (".notes.txt.abcdefgh.tmp", False),  # not a file of the root's
        ("activate.ps1.abcdefgh.tmp", False),  # no leading dot
        (".activate.ps1.abcdefgh.tmp.bak", False),
        ("activate.ps1", False),
    ],
)
def test_which_names_are_stray_temporary_files(name: str, stray: bool) -> None:
    assert stray_temp(name) is stray


def test_the_next_apply_removes_them_and_nothing_else(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    root = tmp_path / "root"
    args = ["apply", str(project.profile_path), "--root", str(root), "--cache", str(tmp_path / "c")]
    assert run_cli(args).code == 0
    left = [".activate.ps1.btfl7u9k.tmp", ".current.json.q1w2e3r4.tmp"]
    kept = [".notes.txt.abcdefgh.tmp", "notes.txt"]
    for name in left + kept:
        (root / name).write_text("partial")
    result = run_cli(args)
    assert result.code == 0, result.text
    names = {p.name for p in root.iterdir()}
    assert not names & set(left)
    assert set(kept) <= names
    assert run_cli(["verify", str(project.profile_path), "--root", str(root)]).code == 0


def test_a_root_whose_first_claim_was_killed_is_adopted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / f".{ROOT_MARKER}.zx81abcd.tmp").write_text("{")  # killed before the rename
    claim_root(root)
    assert is_owned(root)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.csv").write_text("x")
    with pytest.raises(Exception, match="not created by kvenv"):
        claim_root(tmp_path / "other")  # a foreign file still makes a directory foreign
