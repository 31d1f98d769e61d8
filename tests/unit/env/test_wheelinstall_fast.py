"""The cold-apply fast paths of the wheel installer (issue 13): a small member read with its local
header in one ``pread`` (and a long extra field read apart), inflated in one step with its size
still enforced; store files created read-only (no ``chmod`` per file when the entry is sealed);
a failed install under threads removes nested directories deepest first."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvenv.env import wheelinstall
from kvenv.env.store import lookup, unpack
from kvenv.env.wheelinstall import install_wheel
from kvenv.errors import IntegrityError
from tests.support.wheels import build_wheel, sha256_of

LIBRARIES = ["default", "zlib"]


def _library(monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    if library == "zlib":
        monkeypatch.setattr(
            wheelinstall, "_inflate_lib", lambda: (zlib.decompressobj, (zlib.error,))
        )


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _with_extra(wheel: Path, extras: dict[str, int]) -> Path:
    """Rewrite ``wheel`` so the named members carry an extra field of the given length (in the
    local header and the central directory, as ``zipfile`` writes it)."""
    with zipfile.ZipFile(wheel) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w") as zf:
        for info, data in entries:
            length = extras.get(info.filename)
            if length:  # an unknown header id (0xcafe) with ``length`` bytes of payload
                info.extra = struct.pack("<HH", 0xCAFE, length - 4) + b"e" * (length - 4)
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return wheel


@pytest.mark.parametrize("library", LIBRARIES)
def test_members_with_long_local_extra_fields_install_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str
) -> None:
    _library(monkeypatch, library)
    slack = wheelinstall._HEADER_SLACK
    files: dict[str, bytes | str] = {
        "ext/__init__.py": "E = 1\n",
        "ext/short.bin": b"short" * 50,
        "ext/edge.bin": b"edge" * 300,
        "ext/long.bin": os.urandom(3000),
        "ext/empty.bin": b"",
    }
    wheel = build_wheel(tmp_path / "w", "ext", "1", files=files)
    _with_extra(
        wheel,
        {
            "ext/short.bin": 8,
            "ext/edge.bin": slack,
            "ext/long.bin": slack + 700,
            "ext/empty.bin": 4000,
        },
    )
    dist = install_wheel(wheel, tmp_path / "t")
    written = _files(tmp_path / "t")
    for name, content in files.items():
        expected = content.encode() if isinstance(content, str) else content
        assert written[name] == expected
    assert "ext/long.bin" in dist.files


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_small_member_whose_declared_size_lies_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str, delta: int
) -> None:
    """The one-step inflate of a small member still stops one byte past the declared size and
    checks it: a central directory that under- or overstates it is refused, nothing written."""
    _library(monkeypatch, library)
    wheel = build_wheel(tmp_path / "w", "sized", "1", files={"sized/a.txt": "a" * 5000})
    raw = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("sized/a.txt")
    central = raw.index(b"PK\x01\x02")  # the central directory's entry of that member
    while raw[central + 46 : central + 46 + len(info.filename)] != info.filename.encode():
        central = raw.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", raw, central + 24, info.file_size + delta)
    wheel.write_bytes(bytes(raw))
    target = tmp_path / "t"
    with pytest.raises(IntegrityError, match=r"sized/a\.txt"):
        install_wheel(wheel, target)
    assert not target.exists() or not any(p.is_file() for p in target.rglob("*"))


def test_read_only_install_creates_every_file_without_write_bits(tmp_path: Path) -> None:
    wheel = build_wheel(
        tmp_path / "w",
        "ro",
        "1",
        files={"ro/__init__.py": "R = 1\n", "ro-1.data/scripts/tool": "#!python\nprint(1)\n"},
        entry_points={"rocli": "ro:main"},
    )
    install_wheel(wheel, tmp_path / "t", read_only=True, bin_dir=tmp_path / "bin")
    made = [p for p in [*(tmp_path / "t").rglob("*"), *(tmp_path / "bin").rglob("*")]]
    files = [p for p in made if p.is_file()]
    assert len(files) >= 5  # module, WHEEL, METADATA, INSTALLER, RECORD, scripts
    for path in files:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert not mode & 0o222, f"{path} is writable ({oct(mode)})"
    assert stat.S_IMODE((tmp_path / "bin" / "rocli").stat().st_mode) & 0o100
    for path in made:
        if path.is_dir():  # directories stay writable: the seal makes them read-only later
            assert stat.S_IMODE(path.stat().st_mode) & 0o200
    plain = install_wheel(wheel, tmp_path / "plain")
    assert stat.S_IMODE((tmp_path / "plain" / "ro" / "__init__.py").stat().st_mode) & 0o200
    assert plain.files == install_wheel(wheel, tmp_path / "again", read_only=True).files


def test_store_files_are_sealed_without_a_chmod_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {f"many/m{i}.py": f"X = {i}\n" for i in range(40)}
    wheel = build_wheel(tmp_path / "w", "many", "1", files=files)
    chmodded: list[tuple[str, bool]] = []
    real_chmod: Callable[..., Any] = os.chmod

    def counting(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        chmodded.append((os.fspath(path), os.path.isdir(path)))
        real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", counting)
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)
    monkeypatch.undo()
    assert lookup(tmp_path / "store", entry.sha256) is not None
    assert chmodded, "the seal makes the directories read-only"
    # no file of the wheel is chmodded (the seal's own file is written read-only by its writer)
    files_chmodded = [p for p, is_dir in chmodded if not is_dir and ".kvenv-" not in p]
    assert files_chmodded == []
    sealed = [p for p in (entry.path / "site").rglob("*") if p.is_file()]
    assert len(sealed) > 40
    for path in sealed:
        assert not stat.S_IMODE(path.stat().st_mode) & 0o222, path


def test_a_failed_threaded_install_removes_nested_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files: dict[str, bytes | str] = {
        f"deep/a{i}/b{i % 3}/c/m{i}.py": f"X = {i}\n" * (i + 1) for i in range(30)
    }
    wheel = build_wheel(tmp_path / "w", "deep", "1", files=files)
    with zipfile.ZipFile(wheel) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w") as zf:  # the last member's bytes differ from RECORD
        for info, data in entries:
            zf.writestr(info, b"evil" if info.filename == "deep/a29/b2/c/m29.py" else data)
    monkeypatch.setattr(wheelinstall, "SPLIT_BYTES", 0)
    target = tmp_path / "t"
    target.mkdir()
    (target / "keep.txt").write_text("user file")
    with pytest.raises(IntegrityError, match=r"deep/a29/b2/c/m29\.py"):
        install_wheel(wheel, target, jobs=4)
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
