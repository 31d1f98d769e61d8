"""kvenv's code identity when kvenv runs from a zip archive (a single-file bundle): the
archive's stamp stands for its modules, so a record made by another file never matches."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kvenv._util import identity


def test_kvenv_in_a_directory_has_no_archive_stamp() -> None:
    assert identity.archive_stamp() is None
    assert all(entry[0].endswith(".py") for entry in identity.code_identity())


def test_kvenv_in_a_zip_is_identified_by_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "kvenv-demo.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("lib/kvenv/__init__.py", "")
    monkeypatch.setattr(identity, "_PACKAGE", str(archive / "lib" / "kvenv"))
    stamp = identity.archive_stamp()
    assert stamp == identity.stamp(str(archive))
    assert identity.code_identity() == [stamp]
    archive.write_bytes(archive.read_bytes() + b"\0")  # another file: another identity
    assert identity.code_identity() != [stamp]
