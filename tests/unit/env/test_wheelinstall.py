"""The safe wheel installer: real wheels through PyPA installer, hostile wheels refused before
anything is written, contents checked against RECORD, failures rolled back."""

from __future__ import annotations

import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvenv._util.importnames import import_name_of
from kvenv.env.wheelinstall import check_entry_name, install_wheel
from kvenv.errors import InstallError, IntegrityError
from tests.support.wheels import build_wheel


def _tree(path: Path) -> list[str]:
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _rewrite(wheel: Path, *, replace: dict[str, bytes] | None = None, add=()) -> Path:
    """Copy ``wheel`` to a new file with some members replaced and raw members added."""
    out = wheel.with_name(wheel.name)  # same name (the name carries the identity)
    data: list[tuple[zipfile.ZipInfo, bytes]] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            content = zf.read(info)
            if replace and info.filename in replace:
                content = replace[info.filename]
            data.append((info, content))
    with zipfile.ZipFile(out, "w") as zf:
        for info, content in data:
            zf.writestr(info, content)
        for info, content in add:
            zf.writestr(info, content)
    return out


def _raw(name: str, mode: int = 0o644 | stat.S_IFREG) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = mode << 16
    return info


def test_installs_files_scripts_and_record(tmp_path: Path) -> None:
    wheel = build_wheel(
        tmp_path / "w",
        "Demo_Pkg",
        "1.2",
        files={
            "demo_pkg/__init__.py": "def main():\n    print('hello from demo')\n",
            "demo_pkg-1.2.data/scripts/rawtool": "#!python\nprint('raw')\n",
            "demo_pkg-1.2.data/headers/demo.h": "int x;\n",
        },
        entry_points={"demo": "demo_pkg:main"},
    )
    target = tmp_path / "t"
    dist = install_wheel(wheel, target)
    assert (dist.name, dist.version) == ("demo-pkg", "1.2")
    assert dist.top_level == ("demo_pkg",)
    assert dist.scripts == ("demo", "rawtool")
    assert dist.record_digest.startswith("sha256:")
    assert (target / "include" / "demo-pkg" / "demo.h").is_file()
    assert (target / dist.dist_info / "INSTALLER").read_text() == "kvenv\n"
    raw = (target / "bin" / "rawtool").read_text()
    assert raw.startswith(f"#!{sys.executable}\n")
    run = subprocess.run(
        [str(target / "bin" / "demo")],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout == "hello from demo\n"
    record = (target / dist.dist_info / "RECORD").read_text()
    assert "bin/demo,sha256=" in record and "demo_pkg/__init__.py,sha256=" in record


def test_custom_interpreter_and_layout(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "a", "1", entry_points={"a-cli": "a:main"})
    dist = install_wheel(
        wheel, tmp_path / "site", python="/opt/py/bin/python3", bin_dir=tmp_path / "bin"
    )
    assert (tmp_path / "bin" / "a-cli").read_text().startswith("#!/opt/py/bin/python3\n")
    assert "../bin/a-cli" in dist.files


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("../evil.py", "path traversal"),
        ("a/../../evil.py", "path traversal"),
        ("/etc/evil.py", "absolute path"),
        ("C:/evil.py", "absolute path"),
        ("a\\..\\evil.py", "backslash"),
        ("a//b.py", "path traversal"),
    ],
)
def test_refuses_escaping_entries(tmp_path: Path, entry: str, reason: str) -> None:
    wheel = build_wheel(tmp_path / "w", "bad", "1", raw_entries={entry: b"x"})
    with pytest.raises(IntegrityError, match=reason) as caught:
        install_wheel(wheel, tmp_path / "t")
    assert "nothing was installed" in (caught.value.hint or "")
    assert _tree(tmp_path / "t") == []
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        (stat.S_IFLNK | 0o777, "symbolic link"),
        (stat.S_IFCHR | 0o644, "special file"),
        (stat.S_IFIFO | 0o644, "special file"),
    ],
)
def test_refuses_links_and_devices(tmp_path: Path, mode: int, reason: str) -> None:
    wheel = build_wheel(tmp_path / "w", "bad", "1")
    _rewrite(wheel, add=[(_raw("bad/link", mode), b"/etc/passwd")])
    with pytest.raises(IntegrityError, match=reason):
        install_wheel(wheel, tmp_path / "t")
    assert _tree(tmp_path / "t") == []


def test_refuses_unknown_data_scheme(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "bad", "1", files={"bad-1.data/evil/x": "x"})
    with pytest.raises(IntegrityError, match=r"known .data scheme"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_wheel_version_2(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "future", "1", wheel_version="2.0")
    with pytest.raises(IntegrityError, match=r"Wheel-Version 2.0"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_missing_record(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "norec", "1", record=False)
    with pytest.raises(IntegrityError, match="RECORD is missing"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_file_not_in_record(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "extra", "1", raw_entries={"extra/sneaky.py": b"x"})
    with pytest.raises(IntegrityError, match="not listed in RECORD"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_record_listing_absent_files(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "liar", "1")
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("liar-1.dist-info/RECORD")
    _rewrite(
        wheel,
        replace={"liar-1.dist-info/RECORD": record + b"liar/ghost.py,sha256=AAAA,1\n"},
    )
    with pytest.raises(IntegrityError, match=r"lacks: liar/ghost.py"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_weak_record_hash(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "weak", "1")
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("weak-1.dist-info/RECORD").replace(b"sha256=", b"md5=")
    _rewrite(wheel, replace={"weak-1.dist-info/RECORD": record})
    with pytest.raises(IntegrityError, match="need sha256"):
        install_wheel(wheel, tmp_path / "t")


def test_content_differing_from_record_is_rolled_back(tmp_path: Path) -> None:
    wheel = build_wheel(
        tmp_path / "w", "tampered", "1", files={"tampered/a.py": "A = 1\n", "tampered/z.py": "Z\n"}
    )
    _rewrite(wheel, replace={"tampered/z.py": b"Z = 'evil'\n"})
    target = tmp_path / "t"
    target.mkdir()
    (target / "keep.txt").write_text("user file")
    with pytest.raises(IntegrityError, match=r"does not match its RECORD: .*tampered/z.py"):
        install_wheel(wheel, target)
    assert _tree(target) == ["keep.txt"]


@pytest.mark.parametrize(
    "path",
    [
        "torch/__init__.py",
        "torch.py",
        "torch.cpython-312-x86_64-linux-gnu.so",
        "Torch/evil.py",
        "torch-2.0.dist-info/METADATA",
        "functorch/x.py",
        "torchvision/io.py",
        "torch_audio-1.0.dist-info/RECORD.x",
        "sneaky-1.data/platlib/torch-2.0.dist-info/METADATA",
        "sneaky-1.data/purelib/torch/x.py",
    ],
)
def test_refuses_protected_import_names(tmp_path: Path, path: str) -> None:
    wheel = build_wheel(tmp_path / "w", "sneaky", "1", files={path: "x = 1\n"})
    protected = ("torch", "torchvision", "torch-audio")
    with pytest.raises(IntegrityError, match=r"protected|exactly one .dist-info"):
        install_wheel(wheel, tmp_path / "t", protected=protected)
    assert _tree(tmp_path / "t") == []


def test_refuses_a_protected_distribution(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "torch", "9.9", files={"x/__init__.py": ""})
    with pytest.raises(IntegrityError, match="protected host package"):
        install_wheel(wheel, tmp_path / "t", protected=["torch"])


def test_unprotected_names_that_look_alike_install(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "torchmetrics", "1", files={"torchmetrics/a.py": ""})
    dist = install_wheel(wheel, tmp_path / "t", protected=["torch"])
    assert dist.top_level == ("torchmetrics",)


def test_never_overwrites_and_rolls_back(tmp_path: Path) -> None:
    first = build_wheel(tmp_path / "a", "one", "1", files={"shared/x.py": "1", "one/a.py": ""})
    second = build_wheel(tmp_path / "b", "two", "1", files={"two/b.py": "", "shared/x.py": "2"})
    target = tmp_path / "t"
    install_wheel(first, target)
    before = _tree(target)
    with pytest.raises(InstallError, match="would overwrite"):
        install_wheel(second, target)
    assert _tree(target) == before
    assert (target / "shared" / "x.py").read_text() == "1"


def test_unreadable_wheel(tmp_path: Path) -> None:
    bad = tmp_path / "broken-1-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(IntegrityError, match="not a readable wheel"):
        install_wheel(bad, tmp_path / "t")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "c.py"]), min_size=1, max_size=5))
def test_entry_names_with_traversal_never_pass(parts: list[str]) -> None:
    name = "/".join(parts)
    verdict = check_entry_name(name)
    segments = parts[:-1] if len(parts) > 1 and parts[-1] == "" else parts  # "a/" is a dir
    if any(p in ("..", ".", "") for p in segments):
        assert verdict is not None
    else:
        assert verdict is None


def test_import_name_folding() -> None:
    assert import_name_of("torch-2.10.0.dist-info") == "torch"
    assert import_name_of("Torch.cpython-312-x86_64-linux-gnu.so") == "torch"
    assert import_name_of("torch_audio") == "torch_audio"
    assert import_name_of("torchvision") == "torchvision"


def _bulky_wheel(directory: Path, methods: tuple[int, ...]) -> Path:
    """A wheel whose members use each compression method in turn, some larger than a chunk."""
    import random

    rng = random.Random(7)
    files: dict[str, bytes | str] = {
        f"bulky/m{i}.bin": rng.randbytes(rng.randrange(0, 50_000)) + b"z" * (i * 997)
        for i in range(24)
    }
    files["bulky/__init__.py"] = "B = 1\n"
    wheel = build_wheel(directory, "bulky", "1", files=files)
    with zipfile.ZipFile(wheel) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(wheel, "w") as zf:
        for index, (info, data) in enumerate(entries):
            info.compress_type = methods[index % len(methods)]
            zf.writestr(info, data)
    return wheel


def _snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("library", ["default", "zlib"])
def test_split_and_chunked_writes_match_a_plain_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str
) -> None:
    import zlib

    from kvenv.env import wheelinstall

    if library == "zlib":
        monkeypatch.setattr(
            wheelinstall, "_inflate_lib", lambda: (zlib.decompressobj, (zlib.error,))
        )
    methods = (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
    wheel = _bulky_wheel(tmp_path / "w", methods)
    plain = install_wheel(wheel, tmp_path / "plain")
    monkeypatch.setattr(wheelinstall, "SPLIT_BYTES", 0)
    monkeypatch.setattr(wheelinstall, "READ_CHUNK", 4096)
    monkeypatch.setattr(wheelinstall, "OUT_CHUNK", 1000)
    split = install_wheel(wheel, tmp_path / "split", jobs=4)
    assert split == plain
    assert _snapshot(tmp_path / "split") == _snapshot(tmp_path / "plain")
    with zipfile.ZipFile(wheel) as zf:
        for name in ("bulky/m5.bin", "bulky/m23.bin"):
            assert (tmp_path / "split" / name).read_bytes() == zf.read(name)


def test_split_install_rolls_back_everything_on_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvenv.env import wheelinstall

    wheel = _bulky_wheel(tmp_path / "w", (zipfile.ZIP_DEFLATED,))
    _rewrite(wheel, replace={"bulky/m3.bin": b"evil"})
    monkeypatch.setattr(wheelinstall, "SPLIT_BYTES", 0)
    target = tmp_path / "t"
    target.mkdir()
    (target / "keep.txt").write_text("user file")
    with pytest.raises(IntegrityError, match=r"does not match its RECORD: .*bulky/m3.bin"):
        install_wheel(wheel, target, jobs=4)
    assert _tree(target) == ["keep.txt"]


@pytest.mark.parametrize("library", ["default", "zlib"])
def test_corrupt_compressed_data_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str
) -> None:
    import zlib

    from kvenv.env import wheelinstall

    if library == "zlib":
        monkeypatch.setattr(
            wheelinstall, "_inflate_lib", lambda: (zlib.decompressobj, (zlib.error,))
        )
    wheel = _bulky_wheel(tmp_path / "w", (zipfile.ZIP_DEFLATED,))
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("bulky/m20.bin")
    raw = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for offset in range(start + 8, start + info.compress_size - 8, 97):
        raw[offset] ^= 0x5A
    wheel.write_bytes(bytes(raw))
    target = tmp_path / "t"
    with pytest.raises(IntegrityError, match=r"bulky/m20\.bin"):
        install_wheel(wheel, target)
    assert not target.exists() or _tree(target) == []


def test_a_lying_local_header_is_refused(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "liar", "1")
    raw = wheel.read_bytes()
    name = b"liar/__init__.py"
    index = raw.index(name)  # the first occurrence is the local header's copy
    wheel.write_bytes(raw[:index] + b"liar/__evil__.py" + raw[index + len(name) :])
    with pytest.raises(IntegrityError, match="local header does not match"):
        install_wheel(wheel, tmp_path / "t")


def test_refuses_record_hashing_itself(tmp_path: Path) -> None:
    """RECORD cannot hash itself (installer's validate_record's rule, checked in the one
    RECORD pass of inspect_wheel)."""
    wheel = build_wheel(tmp_path / "w", "selfish", "1")
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("selfish-1.dist-info/RECORD")
    lines = [
        b"selfish-1.dist-info/RECORD,sha256=AAAA,10"
        if line.startswith(b"selfish-1.dist-info/RECORD,")
        else line
        for line in record.splitlines()
    ]
    assert lines != record.splitlines()
    _rewrite(wheel, replace={"selfish-1.dist-info/RECORD": b"\n".join(lines) + b"\n"})
    with pytest.raises(IntegrityError, match="hash or size for itself"):
        install_wheel(wheel, tmp_path / "t")
    assert _tree(tmp_path / "t") == []


@pytest.mark.parametrize("listed", [False, True])
def test_signature_files_are_not_listed_in_record(tmp_path: Path, listed: bool) -> None:
    """RECORD.jws may ship unlisted (and is installed, unchecked but CRC-guarded); a RECORD
    that lists it is refused, as installer's validate_record refuses it."""
    signature = "signed-1.dist-info/RECORD.jws"
    wheel = build_wheel(tmp_path / "w", "signed", "1")
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("signed-1.dist-info/RECORD")
    if listed:
        record += f"{signature},,\n".encode()
    _rewrite(
        wheel,
        replace={"signed-1.dist-info/RECORD": record},
        add=[(_raw(signature), b"{}")],
    )
    if listed:
        with pytest.raises(IntegrityError, match="its own signature file"):
            install_wheel(wheel, tmp_path / "t")
        assert _tree(tmp_path / "t") == []
    else:
        install_wheel(wheel, tmp_path / "t")
        assert (tmp_path / "t" / signature).read_bytes() == b"{}"
