"""What a succeeded command keeps for the next one (a profile's facts, recalled answers) is
best effort: a record that cannot be written never turns success into a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvenv.cli.apply
from kvenv.cli import main
from kvenv.errors import InputError


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), InputError("bad")])
def test_a_record_that_cannot_be_written_is_no_failure(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: Exception,
) -> None:
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    tried: list[str] = []

    def broken(*args: object, **kwargs: object) -> None:
        tried.append("remember")
        raise failure

    monkeypatch.setattr(kvenv.cli.apply, "remember_profile", broken)
    code = main(["status", "demo", "--root", str(tmp_path / "root")])
    said = capsys.readouterr()
    assert tried == ["remember"]  # the command succeeded, so it tried to keep its record
    assert code == 0, said.err
    assert "profile: demo" in said.out and said.err == ""


def test_a_refused_command_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    tried: list[str] = []
    monkeypatch.setattr(kvenv.cli.apply, "remember_profile", lambda *a, **k: tried.append("x"))
    root = tmp_path / "root"
    root.mkdir()
    (root / "someone-elses-file").write_text("")  # not a kvenv root: apply refuses
    code = main(["apply", "demo", "--root", str(root), "--offline"])
    capsys.readouterr()
    assert code != 0 and tried == []
