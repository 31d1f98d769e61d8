"""The terminal progress line (kvenv/cli/_io.py): sizes in a unit that suits them, so a small
download never reads ``0.0/0.0 MB`` (issue 26), and an unknown total is said as such."""

from __future__ import annotations

import pytest

from kvenv.cli import _io
from kvenv.cli._io import TerminalProgress, progress_amount


def test_amounts_take_the_unit_of_the_larger() -> None:
    assert progress_amount(512, 999) == "512/999 B"
    assert progress_amount(512, 2048) == "0.5/2.0 kB"
    assert progress_amount(20_000, 40_000) == "20.0/40.0 kB"
    assert progress_amount(300_000, 1_200_000) == "0.3/1.2 MB"
    assert progress_amount(1.5e9, 3e9) == "1.5/3.0 GB"
    assert progress_amount(0, 0) == "0/0 B"
    assert progress_amount(12_000) == "12.0 kB"


def _line(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.replace("\r", "").strip()


def test_a_small_download_is_shown_in_bytes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_io, "VERBOSITY", 0)
    progress = TerminalProgress("fetching", enabled=True)
    progress("mdurl-0.1.2-py3-none-any.whl", 900, 900)
    line = _line(capsys)
    assert line.startswith("fetching 1/1 file(s): 900/900 B, "), line
    assert "0.0/0.0 MB" not in line


def test_an_unknown_total_is_not_shown_as_zero(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_io, "VERBOSITY", 0)
    progress = TerminalProgress("fetching", enabled=True)
    progress("model.safetensors", 2_500_000, None)
    line = _line(capsys)
    assert line.startswith("fetching 0/1 file(s): 2.5 MB (total not known yet), "), line
    assert "/0.0" not in line
