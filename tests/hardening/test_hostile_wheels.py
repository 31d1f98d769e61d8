"""Hostile wheels: each is refused by the installer path before anything is written.

Every case is a real zip built with :func:`tests.support.wheels.build_wheel` and then made
hostile (extra entries with crafted names or Unix modes, a rewritten RECORD or WHEEL). Each goes
through :func:`kvenv.env.wheelinstall.install_wheel` (what ``kvenv apply`` uses via the store) and
through ``kvenv stage-wheel`` (the CLI): a KvenvError / exit 2, and the target untouched.
"""

from __future__ import annotations

import base64
import hashlib
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kvenv.env.wheelinstall import install_wheel
from kvenv.errors import KvenvError
from tests.support.hardening import run_cli, tree_state
from tests.support.wheels import build_wheel

PROTECTED = ("torch", "torchvision", "torchaudio")
DIST_INFO = "goodpkg-1.0.dist-info"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _base(directory: Path, wheel_version: str = "1.0") -> Path:
    return build_wheel(directory, "goodpkg", "1.0", wheel_version=wheel_version)


def _rewrite(
    wheel: Path, change: Callable[[dict[str, tuple[zipfile.ZipInfo, bytes]]], None]
) -> Path:
    """Rewrite ``wheel`` in place after ``change`` edits its ``name -> (info, data)`` map."""
    with zipfile.ZipFile(wheel) as zf:
        entries = {info.filename: (info, zf.read(info)) for info in zf.infolist()}
    change(entries)
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, data in entries.values():
            zf.writestr(info, data)
    return wheel


def _add(
    name: str, data: bytes = b"x = 1\n", mode: int = 0o644 | stat.S_IFREG
) -> Callable[..., None]:
    """Add an entry (listed in RECORD, so only its name or mode is hostile)."""

    def change(entries: dict[str, tuple[zipfile.ZipInfo, bytes]]) -> None:
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = mode << 16
        entries[name] = (info, data)
        record_info, record = entries[f"{DIST_INFO}/RECORD"]
        row = f"{name},sha256={_b64(data)},{len(data)}\n".encode()
        entries[f"{DIST_INFO}/RECORD"] = (record_info, row + record)

    return change


def _record(edit: Callable[[str], str]) -> Callable[..., None]:
    def change(entries: dict[str, tuple[zipfile.ZipInfo, bytes]]) -> None:
        info, data = entries[f"{DIST_INFO}/RECORD"]
        entries[f"{DIST_INFO}/RECORD"] = (info, edit(data.decode()).encode())

    return change


def _file(path: str, edit: Callable[[bytes], bytes]) -> Callable[..., None]:
    def change(entries: dict[str, tuple[zipfile.ZipInfo, bytes]]) -> None:
        info, data = entries[path]
        entries[path] = (info, edit(data))

    return change


def _drop(path: str) -> Callable[..., None]:
    return lambda entries: entries.pop(path)


def _huge_record(entries: dict[str, tuple[zipfile.ZipInfo, bytes]]) -> None:
    info, data = entries[f"{DIST_INFO}/RECORD"]
    entries[f"{DIST_INFO}/RECORD"] = (info, data + b"#" * (65 << 20))


def _weak_hash(text: str) -> str:
    return text.replace("goodpkg/__init__.py,sha256=", "goodpkg/__init__.py,md5=")


HOSTILE: dict[str, Callable[[Path], Path]] = {
    "zip-slip-dotdot": lambda d: _rewrite(_base(d), _add("../evil.py")),
    "zip-slip-nested": lambda d: _rewrite(_base(d), _add("goodpkg/../../evil.py")),
    "zip-slip-data": lambda d: _rewrite(_base(d), _add("goodpkg-1.0.data/purelib/../../evil.py")),
    "absolute-path": lambda d: _rewrite(_base(d), _add("/tmp/evil.py")),
    "drive-letter": lambda d: _rewrite(_base(d), _add("C:/evil.py")),
    "backslash": lambda d: _rewrite(_base(d), _add("goodpkg\\..\\..\\evil.py")),
    "nul-byte": lambda d: _rewrite(_base(d), _add("goodpkg/evil\x00.py")),
    "symlink": lambda d: _rewrite(
        _base(d), _add("goodpkg/link", b"/etc/passwd", 0o777 | stat.S_IFLNK)
    ),
    "char-device": lambda d: _rewrite(_base(d), _add("goodpkg/dev", b"", 0o644 | stat.S_IFCHR)),
    "block-device": lambda d: _rewrite(_base(d), _add("goodpkg/blk", b"", 0o644 | stat.S_IFBLK)),
    "fifo": lambda d: _rewrite(_base(d), _add("goodpkg/fifo", b"", 0o644 | stat.S_IFIFO)),
    "socket": lambda d: _rewrite(_base(d), _add("goodpkg/sock", b"", 0o644 | stat.S_IFSOCK)),
    "unknown-data-scheme": lambda d: _rewrite(_base(d), _add("goodpkg-1.0.data/evil/x.py")),
    "lands-in-torch": lambda d: _rewrite(_base(d), _add("torch/__init__.py")),
    "lands-in-Torch": lambda d: _rewrite(_base(d), _add("Torch/__init__.py")),
    "lands-in-torch.py": lambda d: _rewrite(_base(d), _add("torch.py")),
    "lands-in-torch-so": lambda d: _rewrite(
        _base(d), _add("torch.cpython-312-x86_64-linux-gnu.so")
    ),
    "lands-in-functorch": lambda d: _rewrite(_base(d), _add("functorch/__init__.py")),
    "lands-in-torchvision": lambda d: _rewrite(_base(d), _add("torchvision/ops.py")),
    "lands-in-torch-dist-info": lambda d: _rewrite(
        _base(d), _add("torch-2.10.0.dist-info/METADATA")
    ),
    "lands-in-torch-via-data": lambda d: _rewrite(
        _base(d), _add("goodpkg-1.0.data/platlib/torch/__init__.py")
    ),
    "named-torch": lambda d: build_wheel(d, "torch", "2.10.0"),
    "named-TORCH": lambda d: build_wheel(d, "TORCH", "2.10.0"),
    "record-wrong-hash": lambda d: _rewrite(
        _base(d), _file("goodpkg/__init__.py", lambda b: b + b"#")
    ),
    "record-wrong-size": lambda d: _rewrite(
        _base(d), _record(lambda t: t.replace(",sha256=", ",sha256=", 1).replace(",2", ",99", 1))
    ),
    "record-missing-file": lambda d: _rewrite(
        _base(d), _record(lambda t: "\n".join(x for x in t.splitlines() if "__init__" not in x))
    ),
    "record-extra-file": lambda d: _rewrite(
        _base(d), _record(lambda t: t + "goodpkg/ghost.py,sha256=" + "A" * 43 + ",3\n")
    ),
    "record-no-hash": lambda d: _rewrite(
        _base(d),
        _record(lambda t: t.replace("goodpkg/__init__.py,sha256=", "goodpkg/__init__.py,,#")),
    ),
    "record-weak-hash": lambda d: _rewrite(_base(d), _record(_weak_hash)),
    "record-bad-row": lambda d: _rewrite(_base(d), _record(lambda t: t + "a,b\n")),
    "record-duplicate-row": lambda d: _rewrite(
        _base(d), _record(lambda t: t + t.splitlines()[0] + "\n")
    ),
    "record-huge": lambda d: _rewrite(_base(d), _huge_record),
    "record-missing": lambda d: _rewrite(_base(d), _drop(f"{DIST_INFO}/RECORD")),
    "record-not-utf8": lambda d: (
        _rewrite(_base(d), _record(lambda t: t))
        and _rewrite(
            d / "goodpkg-1.0-py3-none-any.whl",
            _file(f"{DIST_INFO}/RECORD", lambda b: b"\xff\xfe" + b),
        )
    ),
    "wheel-version-2": lambda d: _base(d, wheel_version="2.0"),
    "wheel-version-garbage": lambda d: _base(d, wheel_version="x"),
    "wheel-file-missing": lambda d: _rewrite(_base(d), _drop(f"{DIST_INFO}/WHEEL")),
    "two-dist-infos": lambda d: _rewrite(_base(d), _add("other-1.0.dist-info/METADATA")),
    "dist-info-mismatch": lambda d: _rewrite(
        build_wheel(d / "x", "otherpkg", "1.0"), lambda e: None
    ).rename(d / "goodpkg-1.0-py3-none-any.whl"),
    "not-a-zip": lambda d: _write(d / "goodpkg-1.0-py3-none-any.whl", b"PK\x03\x04 not really"),
    "bad-filename": lambda d: _base(d).rename(d / "goodpkg.whl"),
}


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _duplicate_entry(d: Path) -> Path:
    wheel = _base(d)
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("goodpkg/__init__.py", "x = 2\n")
    return wheel


HOSTILE["duplicate-entry"] = _duplicate_entry
HOSTILE_WHEEL_TOTAL = len(HOSTILE)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_wheel_is_refused(tmp_path: Path, case: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile: duplicate name
        wheel = HOSTILE[case](tmp_path / "w")
    target = tmp_path / "site"
    target.mkdir()
    (target / "keep.txt").write_text("the user's file\n")
    before = tree_state(tmp_path)
    with pytest.raises(KvenvError) as caught:
        install_wheel(wheel, target, protected=PROTECTED, bin_dir=tmp_path / "bin")
    assert caught.value.render().strip()
    assert tree_state(tmp_path) == before
    assert not (tmp_path / "evil.py").exists() and not Path("/tmp/evil.py").exists()
    staged = tmp_path / "staged"
    result = run_cli(["stage-wheel", str(wheel), "--target", str(staged)])
    assert result.code == 2, (result.code, result.out, result.err)
    assert result.err.startswith("kvenv: error:") and "Traceback" not in result.err
    assert not staged.exists() or not any(staged.iterdir())


def test_the_untouched_base_wheel_installs(tmp_path: Path) -> None:
    """The control: every hostile case above differs from this good wheel by one edit."""
    wheel = _base(tmp_path / "w")
    dist = install_wheel(wheel, tmp_path / "site", protected=PROTECTED, bin_dir=tmp_path / "b")
    assert dist.name == "goodpkg" and (tmp_path / "site" / "goodpkg" / "__init__.py").is_file()


# What ``[[overlay.record_waivers]]`` accepts: a RECORD whose hash or size of a file is wrong.
# Every other case stays refused for a waived distribution.
WAIVABLE = frozenset({"record-wrong-hash", "record-wrong-size"})


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_record_waiver_accepts_only_hash_and_size_lies(tmp_path: Path, case: str) -> None:
    import csv
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile: duplicate name
        wheel = HOSTILE[case](tmp_path / "w")
    target = tmp_path / "site"
    waivers = ["goodpkg", "torch", "otherpkg"]
    if case not in WAIVABLE:
        before = tree_state(tmp_path)
        with pytest.raises(KvenvError):
            install_wheel(wheel, target, protected=PROTECTED, record_waivers=waivers)
        assert tree_state(tmp_path) == before
        return
    dist = install_wheel(
        wheel, target, protected=PROTECTED, bin_dir=tmp_path / "bin", record_waivers=["GoodPkg"]
    )
    assert [m.file for m in dist.record_waived] == ["goodpkg/__init__.py"]
    lie = dist.record_waived[0]
    assert lie.expected != lie.actual and lie.expected.startswith("sha256=")
    content = (target / "goodpkg" / "__init__.py").read_bytes()
    assert lie.actual == f"sha256={_b64(content)},{len(content)}"
    # the installed RECORD lists the actual digests, so a later verify checks real content
    record = (target / DIST_INFO / "RECORD").read_text()
    for path, hash_, size in csv.reader(record.splitlines()):
        if hash_:
            data = (target / path).read_bytes()
            assert (hash_, int(size)) == (f"sha256={_b64(data)}", len(data)), path
