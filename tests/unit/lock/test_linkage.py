"""Native wheels gated by what they link: real ELF objects built with gcc, put in real wheels,
read from their headers (in place and by HTTP range requests), recorded by ``kvenv lock`` and
checked by ``kvenv lock`` and ``kvenv plan`` against the target's CUDA and the host's
libraries."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import httpx2
import pytest
import tomllib

from kvenv._util.elf import bytes_reader, read_dynamic
from kvenv.cli import main
from kvenv.errors import ConflictError, IntegrityError
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.linkage import remote_linkage, wheel_linkage
from kvenv.lock.pylock import LinkedObject
from kvenv.lock.sources import IndexConfig
from kvenv.model.loading import LoadedProfile, load_profile
from kvenv.model.snapshot import LibraryInfo, snapshot_from_dict
from kvenv.probe.libs import parse_ldconfig, probe_libraries, record_libraries
from kvenv.probe.linkage import SharedObject, check_linkage
from tests.support.elfobjects import shared_object
from tests.support.lockenv import (
    NATIVE_TAG,
    basic_house,
    serve_index,
    write_project,
)
from tests.support.profiles import loads_profile
from tests.support.wheels import build_wheel, sha256_of


def _readelf(path: Path) -> tuple[tuple[str, ...], str | None]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    needed = tuple(re.findall(r"\(NEEDED\).*\[(.*)\]", out))
    soname = re.findall(r"\(SONAME\).*\[(.*)\]", out)
    return needed, soname[0] if soname else None


def test_the_reader_reads_what_gcc_wrote(tmp_path: Path) -> None:
    path = shared_object(
        tmp_path, "_C.so", needed=["libcudart.so.13", "libtorch_cpu.so"], soname="libext.so.1"
    )
    found = read_dynamic(bytes_reader(path.read_bytes()))
    assert found is not None
    assert found.needed[:2] == ("libcudart.so.13", "libtorch_cpu.so")
    assert "libc.so.6" in found.needed
    assert found.soname == "libext.so.1"
    assert (found.bits, found.machine) in {(64, 62), (64, 183)}
    if subprocess.run(["which", "readelf"], capture_output=True).returncode == 0:
        assert (found.needed, found.soname) == _readelf(path)
    assert read_dynamic(bytes_reader(b"#!/bin/sh\n")) is None  # not ELF: not a shared object


def _native_wheel(
    directory: Path,
    objects: dict[str, Path],
    *,
    stored: bool = False,
    requires: tuple[str, ...] = (),
) -> Path:
    files: dict[str, bytes | str] = {"nativepkg/__init__.py": "__version__ = '1.0.0+cu128'\n"}
    files.update({member: path.read_bytes() for member, path in objects.items()})
    wheel = build_wheel(
        directory, "nativepkg", "1.0.0+cu128", tag=NATIVE_TAG, files=files, requires=requires
    )
    with zipfile.ZipFile(wheel) as archive:
        data = {i.filename: archive.read(i) for i in archive.infolist()}
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(wheel, "w", method) as out:  # the same members, compressed or not
        for name, content in data.items():
            out.writestr(name, content)
    return wheel


def test_a_wheels_shared_objects_are_read_in_place(tmp_path: Path) -> None:
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libcudart.so.13"])
    lib = shared_object(tmp_path / "o", "libbundled-1a2b.so.3", soname="libbundled-1a2b.so.3")
    wheel = _native_wheel(
        tmp_path / "w", {"nativepkg/_C.so": ext, "nativepkg.libs/libbundled-1a2b.so.3": lib}
    )
    found = wheel_linkage(wheel)
    assert [o.path for o in found] == ["nativepkg.libs/libbundled-1a2b.so.3", "nativepkg/_C.so"]
    assert found[0].soname == "libbundled-1a2b.so.3"
    assert found[1].needed[0] == "libcudart.so.13"


def test_a_damaged_object_names_the_wheel_and_member(tmp_path: Path) -> None:
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libfoo.so.1"])
    broken = tmp_path / "o" / "broken.so"
    broken.write_bytes(ext.read_bytes()[:200])  # ELF header, then nothing
    wheel = _native_wheel(tmp_path / "w", {"nativepkg/_C.so": broken})
    with pytest.raises(IntegrityError) as caught:
        wheel_linkage(wheel)
    assert "nativepkg/_C.so is not a readable ELF object" in caught.value.message
    assert str(wheel) in caught.value.message


class _Counting:
    """An HTTP client that counts the bytes it received."""

    def __init__(self, client: httpx2.Client) -> None:
        self.client = client
        self.received = 0
        self.requests = 0

    def get(self, url: str, **kw: Any) -> Any:
        response = self.client.get(url, **kw)
        self.received += len(response.content)
        self.requests += 1
        return response


@pytest.mark.parametrize("stored", [False, True], ids=["deflated", "stored"])
def test_remote_wheels_are_read_by_range_requests(tmp_path: Path, stored: bool) -> None:
    # 6 MiB of read-only data ahead of the dynamic section: past what the reader keeps of the
    # object's start, so the names are read by seeking back
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libcudart.so.13"], filler=6 << 20)
    pad = tmp_path / "o" / "big.bin"
    pad.write_bytes(bytes(range(256)) * (8 << 12))  # 8 MiB that compresses badly
    house = tmp_path / "house"
    wheel = _native_wheel(house, {"nativepkg/_C.so": ext}, stored=stored)
    with zipfile.ZipFile(wheel, "a") as archive:  # a large member that is not an object
        archive.write(pad, "nativepkg/data/big.bin", zipfile.ZIP_STORED)
    with serve_index(house) as index, httpx2.Client(timeout=30) as client:
        session = _Counting(client)
        url = index.replace("/simple/", "/files/") + wheel.name
        found = remote_linkage(session, url, origin=wheel.name)
    assert found == wheel_linkage(wheel)
    assert found[0].needed[0] == "libcudart.so.13"
    with zipfile.ZipFile(wheel) as archive:
        member = archive.getinfo("nativepkg/_C.so")
    if stored:  # a few ranges (of at most 1 MiB): the headers, the dynamic segment, the names
        assert session.received < 4 << 20
    else:  # the member is inflated up to its dynamic segment; nothing else of the wheel
        assert session.received < member.compress_size + (2 << 20)
    assert session.received < wheel.stat().st_size / 2


def _profile_with(loaded: LoadedProfile, target_extra: str, native_extra: str = "") -> None:
    path = loaded.path
    text = path.read_text()
    text = text.replace('glibc = "2.35"\n', f'glibc = "2.35"\n{target_extra}\n', 1)
    text = text.replace(
        'version = "1.0.0+cu128"\n', f'version = "1.0.0+cu128"\n{native_extra}\n', 1
    )
    path.write_text(text)


def _project_with_native(
    tmp_path: Path,
    objects: dict[str, Path],
    *,
    cuda: str | None = "12.8",
    libraries: Any = None,
    requires: tuple[str, ...] = (),
) -> LoadedProfile:
    loaded = write_project(tmp_path / "proj", native_requires=["alpha>=1.0"])
    native = next((tmp_path / "proj" / "native").glob("*.whl"))
    native.unlink()
    wheel = _native_wheel(tmp_path / "proj" / "native", objects, requires=requires)
    text = loaded.path.read_text()
    text = re.sub(r'sha256 = "[0-9a-f]{64}"', f'sha256 = "{sha256_of(wheel)}"', text)
    loaded.path.write_text(text)
    if cuda:
        _profile_with(loaded, f'cuda = "{cuda}"')
    if libraries is not None:
        snapshot = loaded.path.parent / "testbox.host.json"
        data = json.loads(snapshot.read_text())
        data["libraries"] = libraries
        snapshot.write_text(json.dumps(data))
    return load_profile(str(loaded.path))


def _opts(tmp_path: Path, house_dir: Path | None = None) -> LockOptions:
    house = basic_house(house_dir or tmp_path / "house")
    # an overlay wheel that ships a library (auditwheel style), and a pure one with a lookalike
    build_wheel(
        house,
        "fooshim",
        "1.0",
        tag=NATIVE_TAG,
        files={"fooshim/__init__.py": "", "fooshim.libs/libfoo-3a.so.1": b"\x7fELF"},
    )
    return LockOptions(
        index=IndexConfig(find_links=(str(house),), no_index=True), cache_dir=tmp_path / "cache"
    )


CUDA13 = (
    "native CUDA runtime: nativepkg 1.0.0+cu128 needs CUDA 13: libcudart.so.13 (in "
    "nativepkg/_C.so); the target's CUDA is 12.8"
)


def test_lock_refuses_a_cuda_13_wheel_for_a_cuda_12_8_target(tmp_path: Path) -> None:
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libcudart.so.13"])
    loaded = _project_with_native(tmp_path, {"nativepkg/_C.so": ext})
    with pytest.raises(ConflictError) as caught:
        lock_profile(loaded, _opts(tmp_path))
    assert caught.value.message == CUDA13
    assert "built for the target's CUDA 12.8" in (caught.value.hint or "")


def test_lock_records_the_linkage_and_plan_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ext = shared_object(
        tmp_path / "o", "_C.so", needed=["libcudart.so.12", "libtorch_cpu.so", "libnuma.so.1"]
    )
    host_libs = {
        "system": ["libc.so.6", "libnuma.so.1"],
        "packages": {"torch": ["libtorch_cpu.so"], "nvidia-cuda-runtime-cu12": ["libcudart.so.12"]},
    }
    loaded = _project_with_native(tmp_path, {"nativepkg/_C.so": ext}, libraries=host_libs)
    result = lock_profile(loaded, _opts(tmp_path))
    recorded = tomllib.loads(result.text)["tool"]["kvenv"]["native"]["linkage"]
    assert recorded == [
        {
            "path": "nativepkg/_C.so",
            "needed": ["libcudart.so.12", "libtorch_cpu.so", "libnuma.so.1", "libc.so.6"],
        }
    ]
    result.path.parent.mkdir(parents=True, exist_ok=True)
    result.path.write_text(result.text)
    snapshot = loaded.path.parent / "testbox.host.json"
    where = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    assert main(["plan", str(loaded.path), "--host", str(snapshot), *where]) == 0
    out = capsys.readouterr().out
    assert "PASS     native CUDA runtime: within the target's CUDA 12.8" in out
    assert "PASS     native linkage: 1 shared object(s) of nativepkg 1.0.0+cu128" in out
    # the same plan on a host without libnuma: refused, naming the library and the object
    data = json.loads(snapshot.read_text())
    data["libraries"]["system"] = ["libc.so.6"]
    (tmp_path / "bare.json").write_text(json.dumps(data))
    assert main(["plan", str(loaded.path), "--host", str(tmp_path / "bare.json"), *where]) == 3
    errors = [line for line in capsys.readouterr().out.splitlines() if "ERROR" in line]
    assert errors == [
        "  ERROR    native linkage: nativepkg 1.0.0+cu128 needs libraries this host does not "
        "provide: libnuma.so.1 (in nativepkg/_C.so) (fix: install it on the host (the system "
        "package that ships it), or, when something kvenv does not see provides it (an "
        "overlay wheel, LD_LIBRARY_PATH), list it in [native] provided_libs)"
    ]


def test_a_wheel_whose_libraries_are_all_provided_passes(tmp_path: Path) -> None:
    lib = shared_object(tmp_path / "o", "libhelper-9f.so.2", soname="libhelper-9f.so.2")
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libhelper-9f.so.2", "libgomp.so.1"])
    objects = [
        SharedObject("nativepkg.libs/libhelper-9f.so.2", (), "libhelper-9f.so.2"),
        SharedObject("nativepkg/_C.so", tuple(read_dynamic(bytes_reader(ext.read_bytes())).needed)),  # type: ignore[union-attr]
    ]
    assert lib.exists()
    profile = loads_profile(
        'schema = 1\nname = "p"\n[target]\npython = "3.12"\nabi = "cp312"\ncuda = "12.8"\n'
    )
    host = snapshot_from_dict(
        {
            "schema": 1,
            "python": {"version": "3.12.3", "abi": "cp312"},
            "platform": {"os": "linux", "machine": "x86_64"},
            "libraries": {"system": ["libgomp.so.1"]},
        }
    )
    findings = check_linkage(objects, native="n 1", target=profile.target, host=host)
    assert [(f.check, f.status) for f in findings] == [("native linkage", "pass")]
    # the host not recording its libraries: untested, never passed
    bare = snapshot_from_dict({**json.loads(json.dumps(host_dict(host))), "libraries": None})
    findings = check_linkage(objects, native="n 1", target=profile.target, host=bare)
    assert [(f.check, f.status) for f in findings] == [("native linkage", "untested")]
    assert "libgomp.so.1" in findings[0].message
    # declared by the profile
    findings = check_linkage(
        objects, native="n 1", target=profile.target, host=bare, declared=["libgomp.so.1"]
    )
    assert [f.status for f in findings] == ["pass"]


def host_dict(host: Any) -> dict[str, Any]:
    from kvenv.model.snapshot import snapshot_to_dict

    return snapshot_to_dict(host)


@pytest.mark.parametrize(("cuda", "status"), [("13.0", "pass"), ("12.8", "error"), (None, "error")])
def test_the_cuda_major_against_the_target(cuda: str | None, status: str) -> None:
    extra = f'cuda = "{cuda}"\n' if cuda else ""
    profile = loads_profile(
        f'schema = 1\nname = "p"\n[target]\npython = "3.12"\nabi = "cp312"\n{extra}'
    )
    objects = [SharedObject("pkg/_C.so", ("libcudart.so.13", "libcublas.so.13"))]
    findings = check_linkage(objects, native="n 1", target=profile.target, host=None)
    cuda_findings = [f for f in findings if f.check == "native CUDA runtime"]
    assert [f.status for f in cuda_findings] == [status]
    if status == "error":
        assert "libcublas.so.13 (in pkg/_C.so); libcudart.so.13 (in pkg/_C.so)" in (
            cuda_findings[0].message
        )


def test_an_old_lock_without_linkage_is_untested() -> None:
    findings = check_linkage(None, native="n 1", target=None, host=None)
    assert [f.status for f in findings] == ["untested"]
    assert "kvenv lock" in (findings[0].fix or "")


def test_the_committed_locks_still_check(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("kaggle-t4x2-cu128", "colab-gpu"):
        assert main(["lock", "--check", name]) == 0
    capsys.readouterr()


def test_host_libraries_from_ldconfig_and_records() -> None:
    text = (
        "3 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibnuma.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnuma.so.1\n"
        "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n"
        "\tld-linux-x86-64.so.2 (libc6,x86-64) => /lib64/ld-linux-x86-64.so.2\n"
    )
    assert parse_ldconfig(text) == ["ld-linux-x86-64.so.2", "libc.so.6", "libnuma.so.1"]
    record = (
        "torch/lib/libtorch_cpu.so,sha256=x,1\n"
        "torch/lib/libgomp-a34b3233.so.1,sha256=y,2\n"
        "torch/_C.cpython-312-x86_64-linux-gnu.so,sha256=z,3\n"
        "torch/__init__.py,sha256=w,4\n"
    )
    assert record_libraries(record) == ["libgomp-a34b3233.so.1", "libtorch_cpu.so"]
    from kvenv.model.snapshot import Distribution
    from kvenv.probe.effects import Effects, RunResult

    effects = Effects.recorded(
        files={"/sp/torch-2.13.0+cpu.dist-info/RECORD": record},
        commands={"ldconfig -p": RunResult(0, text)},
    )
    dists = [Distribution("torch", "2.13.0+cpu", location="/sp")]  # type: ignore[arg-type]
    info = probe_libraries(effects, dists)
    assert info == LibraryInfo(
        system=["ld-linux-x86-64.so.2", "libc.so.6", "libnuma.so.1"],
        packages={"torch": ["libgomp-a34b3233.so.1", "libtorch_cpu.so"]},
    )
    assert info.provides("libtorch_cpu.so") == "torch"
    assert probe_libraries(Effects.recorded(), []) is None


def test_linked_object_round_trip() -> None:
    entry = LinkedObject("a/_C.so", ["libc.so.6"], None)
    assert entry.soname is None


def test_a_library_an_overlay_wheel_ships_is_provided(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The native needs libfoo-3a.so.1, which the recorded host lacks and the overlay wheel
    fooshim (a dependency of the native) ships: the lock records that the overlay provides it,
    and plan passes on that host; without fooshim in the overlay the lock is refused."""
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libfoo-3a.so.1"])
    host_libs = {"system": ["libc.so.6"], "packages": {}}
    loaded = _project_with_native(
        tmp_path / "with",
        {"nativepkg/_C.so": ext},
        libraries=host_libs,
        requires=("fooshim",),
    )
    result = lock_profile(loaded, _opts(tmp_path / "with", tmp_path / "with" / "proj" / "house"))
    native = tomllib.loads(result.text)["tool"]["kvenv"]["native"]
    assert native["overlay-provides"] == ["libfoo-3a.so.1"]
    result.path.parent.mkdir(parents=True, exist_ok=True)
    result.path.write_text(result.text)
    snapshot = loaded.path.parent / "testbox.host.json"
    where = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    assert main(["plan", str(loaded.path), "--host", str(snapshot), *where]) == 0
    loaded = _project_with_native(
        tmp_path / "without", {"nativepkg/_C.so": ext}, libraries=host_libs
    )
    with pytest.raises(ConflictError) as caught:
        lock_profile(loaded, _opts(tmp_path / "without"))
    assert caught.value.message == (
        "native linkage: nativepkg 1.0.0+cu128 needs libraries this host does not provide: "
        "libfoo-3a.so.1 (in nativepkg/_C.so)"
    )
    capsys.readouterr()


def test_plan_refuses_a_cuda_13_wheel_once_the_target_is_cuda_12_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Locked for a CUDA 13.0 target, then the profile moved to CUDA 12.8: the plan refuses the
    native wheel with one clear error (and the CLI's lock refuses it with exit 3)."""
    ext = shared_object(tmp_path / "o", "_C.so", needed=["libcudart.so.13"])
    loaded = _project_with_native(tmp_path, {"nativepkg/_C.so": ext}, cuda="13.0")
    result = lock_profile(loaded, _opts(tmp_path))
    result.path.parent.mkdir(parents=True, exist_ok=True)
    result.path.write_text(result.text)
    loaded.path.write_text(loaded.path.read_text().replace('cuda = "13.0"', 'cuda = "12.8"'))
    snapshot = loaded.path.parent / "testbox.host.json"
    where = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    capsys.readouterr()
    assert main(["plan", str(loaded.path), "--host", str(snapshot), *where]) == 3
    errors = [line for line in capsys.readouterr().out.splitlines() if "ERROR" in line]
    assert errors == [
        f"  ERROR    {CUDA13} (fix: use a native wheel built for the target's CUDA 12.8, or a "
        "profile (and host torch) for the CUDA the wheel needs)"
    ]
    house = tmp_path / "house"
    lock = ["lock", str(loaded.path), "--find-links", str(house), "--no-index"]
    assert main([*lock, "--cache-dir", str(tmp_path / "cache")]) == 3
    err = capsys.readouterr().err
    assert CUDA13 in err
    assert err.count("native CUDA runtime") == 1


def test_a_compressed_object_is_not_inflated_past_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers that point far into a deflated member (a zip bomb's way of making the lock
    inflate for hours) stop the read with one message naming the member."""
    from kvenv.lock import linkage

    ext = shared_object(tmp_path / "o", "_C.so", needed=["libfoo.so.1"], filler=6 << 20)
    wheel = _native_wheel(tmp_path / "w", {"nativepkg/_C.so": ext})
    assert wheel_linkage(wheel)[0].needed[0] == "libfoo.so.1"
    monkeypatch.setattr(linkage, "MAX_INFLATE", 5 << 20)  # the dynamic section lies past 6 MiB
    with pytest.raises(IntegrityError) as caught:
        wheel_linkage(wheel)
    assert "nativepkg/_C.so is not a readable ELF object" in caught.value.message
    assert "inflates at most 5242880 bytes" in caught.value.message
