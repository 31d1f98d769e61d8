"""The content-addressed store: each wheel unpacked once; generations are hard links."""

from __future__ import annotations

import errno
import os
import sys
import zipfile
from pathlib import Path

import pytest

from kvenv.env import linking, store
from kvenv.env.manifest import FileConflict
from kvenv.env.store import GenerationLayout, link_layer, lookup, unpack, unpack_all
from kvenv.errors import InstallError, IntegrityError
from tests.support.applyenv import helper_wheel, native_wheel, sha256_of
from tests.support.wheels import build_wheel


def _layout(base: Path, name: str = "overlay") -> GenerationLayout:
    site = base / name
    site.mkdir(parents=True, exist_ok=True)
    (base / "bin").mkdir(exist_ok=True)
    return GenerationLayout.beside(site)


def test_unpacks_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = helper_wheel(tmp_path / "w")
    sha = sha256_of(wheel)
    entry = unpack(tmp_path / "store", sha, wheel)
    assert entry.path == tmp_path / "store" / sha
    assert (entry.path / store.MARKER).is_file()
    assert "helper/__init__.py" in entry.dist.files
    calls: list[Path] = []
    monkeypatch.setattr(store, "install_wheel", lambda *a, **k: calls.append(a[0]))
    again = unpack(tmp_path / "store", sha, wheel)
    assert again == entry and calls == []
    assert [p.name for p in (tmp_path / "store").iterdir()] == [sha]


def test_incomplete_entry_is_redone(tmp_path: Path) -> None:
    wheel = helper_wheel(tmp_path / "w")
    sha = sha256_of(wheel)
    leftover = tmp_path / "store" / sha
    (leftover / "site").mkdir(parents=True)
    (leftover / "site" / "junk.py").write_text("half-written")
    assert lookup(tmp_path / "store", sha) is None
    entry = unpack(tmp_path / "store", sha, wheel)
    assert not (entry.path / "site" / "junk.py").exists()
    assert lookup(tmp_path / "store", sha) is not None


def test_failed_unpack_leaves_no_entry(tmp_path: Path) -> None:
    bad = build_wheel(tmp_path / "w", "bad", "1", raw_entries={"../x": b"x"})
    with pytest.raises(IntegrityError):
        unpack(tmp_path / "store", sha256_of(bad), bad)
    assert list((tmp_path / "store").iterdir()) == []


def test_generation_is_hard_links_with_fixed_scripts(tmp_path: Path) -> None:
    native = native_wheel(tmp_path / "w")
    helper = helper_wheel(tmp_path / "w")
    entries = unpack_all(
        tmp_path / "store", {sha256_of(native): native, sha256_of(helper): helper}, jobs=2
    )
    gen = tmp_path / "gen"
    layout = _layout(gen, "native")
    dists = link_layer(
        [entries[sha256_of(native)]], layout, python="/usr/bin/python3.99", protected=["torch"]
    ).dists
    source = entries[sha256_of(native)].path / "site" / "nativepkg" / "__init__.py"
    linked = gen / "native" / "nativepkg" / "__init__.py"
    assert os.stat(source).st_ino == os.stat(linked).st_ino
    script = (gen / "bin" / "nativecli").read_text()
    assert script.startswith("#!/usr/bin/python3.99\n")
    assert (
        (entries[sha256_of(native)].path / "bin" / "nativecli").read_text().startswith("#!python\n")
    )
    # the generation's RECORD carries the script's new hash, and verify-style checks pass
    from kvenv.env.verify import _check_file

    record = (gen / "native" / dists[0].dist_info / "RECORD").read_text()
    row = next(line for line in record.splitlines() if line.startswith("../bin/nativecli,"))
    _, hash_, size = row.split(",")
    algorithm, _, value = hash_.partition("=")
    assert _check_file((gen / "bin" / "nativecli", algorithm, value, size)) is None
    assert dists[0].record_digest != entries[sha256_of(native)].dist.record_digest


def test_copies_when_links_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = helper_wheel(tmp_path / "w")
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)

    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    layout = _layout(tmp_path / "gen")
    link_layer([entry], layout, python=sys.executable, allow_pth=["helper"])  # its .pth hook
    copied = tmp_path / "gen" / "overlay" / "helper" / "__init__.py"
    assert copied.read_text() == "V = 'helper-2.0'\n"
    assert os.stat(copied).st_ino != os.stat(entry.source_of("helper/__init__.py")).st_ino


def test_identical_shared_files_are_fine_different_ones_resolve_by_name(tmp_path: Path) -> None:
    same = {"nspkg/__init__.py": ""}
    a = build_wheel(tmp_path / "w", "a", "1", files={**same, "a/x.py": ""})
    b = build_wheel(tmp_path / "w", "b", "1", files={**same, "b/x.py": ""})
    c = build_wheel(tmp_path / "w", "c", "1", files={"nspkg/__init__.py": "different = 1\n"})
    entries = unpack_all(tmp_path / "store", {sha256_of(w): w for w in (a, b, c)})
    ok = link_layer(
        [entries[sha256_of(a)], entries[sha256_of(b)]], _layout(tmp_path / "g1"), python="py"
    )
    assert (tmp_path / "g1" / "overlay" / "b" / "x.py").exists() and ok.conflicts == []
    # c is listed first, but a comes first in name order: a keeps the file, whatever the order
    for order in ([c, a], [a, c]):
        gen = tmp_path / f"g-{order[0].name[0]}"
        layer = link_layer([entries[sha256_of(w)] for w in order], _layout(gen), python="py")
        assert layer.conflicts == [FileConflict("nspkg/__init__.py", "a", "c", "overlay")]
        assert (gen / "overlay" / "nspkg" / "__init__.py").read_text() == ""
        assert [d.name for d in layer.dists] == [w.name[0] for w in order]


def test_conflicting_scripts_resolve_by_name(tmp_path: Path) -> None:
    z = build_wheel(tmp_path / "w", "zeta", "1", entry_points={"tool": "zeta:main"})
    y = build_wheel(tmp_path / "w", "alpha", "1", entry_points={"tool": "alpha:main"})
    entries = unpack_all(tmp_path / "store", {sha256_of(w): w for w in (z, y)})
    layer = link_layer(
        [entries[sha256_of(z)], entries[sha256_of(y)]], _layout(tmp_path / "g"), python="py"
    )
    assert layer.conflicts == [FileConflict("../bin/tool", "alpha", "zeta", "overlay")]
    assert "alpha" in (tmp_path / "g" / "bin" / "tool").read_text()


def test_overlay_never_replaces_a_native_file_of_a_shared_dir(tmp_path: Path) -> None:
    data = "nat-1.data/data/share/nat/conf.txt"
    native = build_wheel(tmp_path / "w", "nat", "1", files={"nat/__init__.py": "", data: "n"})
    same = build_wheel(
        tmp_path / "w", "ov", "1", files={"ov/__init__.py": "", data.replace("nat-1", "ov-1"): "n"}
    )
    other = build_wheel(
        tmp_path / "w", "ov", "2", files={"ov/__init__.py": "", data.replace("nat-1", "ov-2"): "o"}
    )
    entries = unpack_all(tmp_path / "store", {sha256_of(w): w for w in (native, same, other)})
    for name, wheel in (("ok", same), ("bad", other)):
        gen = tmp_path / name
        link_layer([entries[sha256_of(native)]], _layout(gen, "native"), python="py")
        overlay = [entries[sha256_of(wheel)]]
        if wheel is same:
            link_layer(overlay, _layout(gen), python="py")
            assert (gen / "data" / "share" / "nat" / "conf.txt").read_text() == "n"
            continue
        with pytest.raises(InstallError, match=r"ov 2 would replace .*conf.txt.*native layer"):
            link_layer(overlay, _layout(gen), python="py")
        assert (gen / "data" / "share" / "nat" / "conf.txt").read_text() == "n"


def test_waived_store_entry_links_only_where_the_profile_waives_it(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "liar", "1", files={"liar/__init__.py": "x = 1\n"})
    _lie_in_record(wheel, "liar-1.dist-info/RECORD", "liar/__init__.py")
    with pytest.raises(IntegrityError, match="does not match its RECORD"):
        unpack(tmp_path / "store", sha256_of(wheel), wheel)
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel, record_waivers=["Liar"])
    assert [m.file for m in entry.dist.record_waived] == ["liar/__init__.py"]
    assert lookup(tmp_path / "store", sha256_of(wheel)) == entry  # the marker keeps the lies
    with pytest.raises(IntegrityError, match=r"liar 1 \(1 file\(s\): liar/__init__.py\)"):
        link_layer([entry], _layout(tmp_path / "g1"), python="py")
    assert not (tmp_path / "g1" / "overlay" / "liar").exists()
    link_layer([entry], _layout(tmp_path / "g2"), python="py", record_waivers=["liar"])
    assert (tmp_path / "g2" / "overlay" / "liar" / "__init__.py").read_text() == "x = 1\n"


def _lie_in_record(wheel: Path, record: str, path: str) -> None:
    """Give ``path`` a wrong hash in the wheel's RECORD (the bytes themselves unchanged)."""
    with zipfile.ZipFile(wheel) as zf:
        entries = {info.filename: (info, zf.read(info)) for info in zf.infolist()}
    info, data = entries[record]
    rows = [
        f"{path},sha256={'A' * 43},{len(entries[path][1])}" if row.startswith(f"{path},") else row
        for row in data.decode().splitlines()
    ]
    entries[record] = (info, ("\n".join(rows) + "\n").encode())
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, content in entries.values():
            zf.writestr(info, content)


def test_protected_is_checked_again_when_linking(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "w", "mylib", "1", files={"mylib/a.py": "", "torchgen/b.py": ""})
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)  # no protected set: stored
    with pytest.raises(IntegrityError, match="protected package 'torchgen'"):
        link_layer([entry], _layout(tmp_path / "g"), python=sys.executable, protected=["torch"])


def test_many_files_link_in_parallel(tmp_path: Path) -> None:
    files = {f"big/m{i}.py": f"X = {i}\n" for i in range(1200)}
    wheel = build_wheel(tmp_path / "w", "big", "1", files=files)
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)
    link_layer([entry], _layout(tmp_path / "g"), python=sys.executable, jobs=4)
    assert len(list((tmp_path / "g" / "overlay" / "big").iterdir())) == 1200


def test_many_directories_link_in_parallel_batches(tmp_path: Path) -> None:
    files = {f"wide/d{d}/m{i}.py": f"X = {d * 100 + i}\n" for d in range(40) for i in range(30)}
    wheel = build_wheel(tmp_path / "w", "wide", "1", files=files)
    entry = unpack(tmp_path / "store", sha256_of(wheel), wheel)
    reports: list[tuple[str, int, int]] = []
    link_layer(
        [entry],
        _layout(tmp_path / "g"),
        python=sys.executable,
        jobs=4,
        progress=lambda what, done, total: reports.append((what, done, total)),
    )
    total = len(entry.dist.files)
    assert reports[-1] == ("link", total, total)
    for path in files:
        linked = tmp_path / "g" / "overlay" / path
        assert linked.read_text() == files[path]
        assert os.stat(linked).st_ino == os.stat(entry.source_of(path)).st_ino


def test_an_entry_another_process_just_finished_is_used_not_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two applies sharing one store (two roots, one cache): this one looked before the other
    renamed its complete entry into place. That entry is used, never removed as a leftover: the
    other apply may be linking from it (found by the slow concurrency harness)."""
    wheel = helper_wheel(tmp_path / "w")
    sha = sha256_of(wheel)
    entry = unpack(tmp_path / "store", sha, wheel)  # the other process's finished entry
    inode = (entry.path / "site" / "helper" / "__init__.py").stat().st_ino
    real = store.lookup
    looks: list[str] = []

    def late(where: Path, sha256: str) -> store.StoreEntry | None:
        looks.append(sha256)  # the first look happened before the other process's rename
        return None if len(looks) == 1 else real(where, sha256)

    monkeypatch.setattr(store, "lookup", late)
    monkeypatch.setattr(store, "install_wheel", lambda *a, **k: pytest.fail("unpacked again"))
    again = unpack(tmp_path / "store", sha, wheel)
    assert again.path == entry.path
    assert (entry.path / "site" / "helper" / "__init__.py").stat().st_ino == inode


def _tree(root: Path) -> dict[str, tuple[str, int | None]]:
    """Every path under ``root``: its kind and, for a file, its bytes' hash."""
    import hashlib

    out: dict[str, tuple[str, int | None]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            out[rel] = ("dir", None)
        else:
            digest = int.from_bytes(hashlib.sha256(path.read_bytes()).digest()[:8], "big")
            out[rel] = ("file", digest)
    return out


def test_parallel_linking_builds_the_same_layer_as_serial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several real wheels with many directories, a shared file with equal bytes, a file two
    wheels ship with different bytes, scripts and data: linked by one thread and by four (in
    batches of a few files, so that batches race to make parent directories), the layers are
    the same tree, the same RECORDs and the same conflicts."""
    monkeypatch.setattr(linking, "LINK_CHUNK", 7)
    wheels = []
    for name in ("zeta", "alpha", "mid"):
        files = {f"{name}/d{d}/s{s}/m{i}.py": f"{name} {d} {s} {i}\n" for d in range(6)
                 for s in range(3) for i in range(4)}  # fmt: skip
        files["shared/__init__.py"] = ""  # equal bytes everywhere: not a conflict
        files["shared/version.py"] = f"WHO = {name!r}\n"  # different bytes: a conflict
        files[f"{name}-1.data/data/share/{name}/conf.txt"] = name
        wheels.append(
            build_wheel(tmp_path / "w", name, "1", files=files, entry_points={name: "x:main"})
        )
    entries = unpack_all(tmp_path / "store", {sha256_of(w): w for w in wheels}, jobs=2)
    chosen = [entries[sha256_of(w)] for w in wheels]
    serial = link_layer(chosen, _layout(tmp_path / "serial"), python="py", jobs=1)
    parallel = link_layer(chosen, _layout(tmp_path / "parallel"), python="py", jobs=4)
    assert serial == parallel
    assert sorted((c.file, c.winner, c.loser) for c in serial.conflicts) == [
        ("shared/version.py", "alpha", "mid"),
        ("shared/version.py", "alpha", "zeta"),
    ]
    tree = _tree(tmp_path / "serial")
    assert tree == _tree(tmp_path / "parallel")
    assert sum(1 for kind, _ in tree.values() if kind == "file") > 3 * 6 * 3 * 4
    linked = tmp_path / "parallel" / "overlay" / "zeta" / "d5" / "s2" / "m3.py"
    assert (
        linked.stat().st_ino
        == entries[sha256_of(wheels[0])].source_of("zeta/d5/s2/m3.py").stat().st_ino
    )
    assert (tmp_path / "parallel" / "overlay" / "shared" / "version.py").read_text() == (
        "WHO = 'alpha'\n"
    )
