"""kvenv.fetch.pyz (building and reading single-file bundles) and the verifier it starts with
(kvenv.cli.pyzboot), in process. The file run by a fresh interpreter with no network is
tests/unit/cli/test_single_file.py."""

from __future__ import annotations

import json
import pkgutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kvenv.cli import pyzboot
from kvenv.errors import InputError, KvenvError
from kvenv.fetch.cache import ArtifactCache
from kvenv.fetch.pyz import (
    DISTRIBUTION,
    LEFT_OUT,
    OFFLINE_NEEDS,
    Lib,
    SingleFile,
    lib_of,
    make_single_file,
    oldest_python,
    stream_artifacts,
    zip_requires,
)
from kvenv.fetch.pyzread import open_single_file, unpack_project
from tests.support.applyenv import local_project


def _boot() -> str:
    data = pkgutil.get_data("kvenv.cli", "pyzboot.py")
    assert data is not None
    return data.decode()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> SingleFile:
    base = tmp_path_factory.mktemp("pyz")
    project = local_project(base / "proj")
    return make_single_file(
        project.loaded(), base / "out" / "kvenv-t.pyz", boot=_boot(), cache=base / "cache"
    )


def test_every_requirement_of_kvenv_is_carried_or_left_out_with_a_reason() -> None:
    required = {
        canonicalize_name(Requirement(text).name)
        for text in metadata.requires(DISTRIBUTION) or []
        if "extra ==" not in text
    }
    covered = {canonicalize_name(Requirement(n).name) for n in (*OFFLINE_NEEDS, *LEFT_OUT)}
    assert required, "kvenv's own metadata lists its requirements"
    assert required <= covered, f"decide for each: {sorted(required - covered)}"


def test_a_distribution_with_native_code_is_refused(tmp_path: Path) -> None:
    info = tmp_path / "fast-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fast\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        "fast/__init__.py,,\nfast/_speed.cpython-311-x86_64-linux-gnu.so,,\n"
        "fast-1.0.dist-info/METADATA,,\nfast-1.0.dist-info/RECORD,,\n"
    )
    with pytest.raises(InputError, match=r"fast 1\.0 holds native code \(fast/_speed"):
        lib_of(metadata.PathDistribution(info))


def test_a_pure_distribution_brings_its_modules_and_metadata() -> None:
    lib = lib_of(metadata.distribution("attrs"))
    assert "attr/__init__.py" in lib.files and "attrs/__init__.py" in lib.files
    assert any(name.endswith(".dist-info/METADATA") for name in lib.files)
    assert not any(name.endswith((".pyc", "/RECORD")) for name in lib.files)


def _lib(name: str, requires_python: str | None = ">=3.8", *requirements: str) -> Lib:
    return Lib(name, "1", {}, requires_python, list(requirements))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is there from 3.11")
def test_the_oldest_python_is_where_no_left_out_requirement_applies() -> None:
    without = [_lib("kvenv-overlay", ">=3.10", 'tomli>=2; python_version < "3.11"')]
    assert oldest_python(without) == (3, 11)
    assert oldest_python([*without, _lib("tomli")]) == (3, 10)
    assert oldest_python([*without, _lib("tomli"), _lib("new", ">=3.11")]) == (3, 11)


def test_past_four_gib_or_65535_members_the_file_needs_python_3_13() -> None:
    assert zip_requires(10**9, 5000, (3, 11)) == (3, 11)
    assert zip_requires(5 * 2**30, 5000, (3, 11)) == (3, 13)
    assert zip_requires(10**9, 70000, (3, 10)) == (3, 13)


def test_the_file_holds_the_bundle_kvenv_and_its_verifier(built: SingleFile) -> None:
    with zipfile.ZipFile(built.path) as archive:
        names = set(archive.namelist())
        main = archive.read("__main__.py").decode()
        manifest = json.loads(archive.read("kvenv-pyz.json"))
        wheel_infos = [i for i in archive.infolist() if i.filename.startswith("bundle/wheels/")]
    assert {"bundle/bundle.json", "bundle/SHA256SUMS", "lib/kvenv/cli/pyzrun.py"} <= names
    assert "lib/attr/__init__.py" in names and "lib/packaging/version.py" in names
    assert not any(n.startswith(("lib/isal", "lib/huggingface_hub", "lib/unearth")) for n in names)
    assert len(wheel_infos) == 2 and all(i.compress_type == zipfile.ZIP_STORED for i in wheel_infos)
    assert f"REQUIRES = {built.requires!r}  # oldest CPython" in main
    assert manifest["requires_python"] == list(built.requires)
    assert {d["name"] for d in manifest["left_out"]} == set(LEFT_OUT)
    # the verifier passes the file as built; the digest it carries covers all but itself
    assert pyzboot.file_problem(str(built.path)) == (None, built.sha256)
    assert pyzboot.file_problem(str(built.path), built.sha256) == (None, built.sha256)
    carried, body, whole = pyzboot.digests(str(built.path))
    assert carried == body and whole == built.sha256


def test_the_verifier_refuses_another_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pyzboot.interpreter_problem("x.pyz") is None
    monkeypatch.setattr(pyzboot, "REQUIRES", (3, 99))
    problem = pyzboot.interpreter_problem("x.pyz")
    assert problem is not None and problem.startswith("x.pyz runs on CPython 3.99 or newer; ")


def test_the_project_is_unpacked_again_when_a_file_of_it_changed(
    built: SingleFile, tmp_path: Path
) -> None:
    opened = open_single_file(built.path, built.sha256)
    directory = unpack_project(opened, tmp_path)
    profile = directory / opened.profile_file
    original = profile.read_bytes()
    assert not (directory / "wheels").exists()  # wheels go to the artifact cache, not here
    profile.write_bytes(original + b"# edited\n")
    assert unpack_project(opened, tmp_path) == directory
    assert profile.read_bytes() == original


def test_only_the_wheels_the_cache_lacks_are_streamed(built: SingleFile, tmp_path: Path) -> None:
    opened = open_single_file(built.path, built.sha256)
    first = stream_artifacts(opened, tmp_path / "cache")
    assert sorted(first) == sorted(a["filename"] for a in opened.artifacts)
    assert stream_artifacts(opened, tmp_path / "cache") == []
    cache = ArtifactCache(tmp_path / "cache")
    for item in opened.artifacts:
        found = cache.lookup(item["sha256"], item["size"], item["filename"], rehash=True)
        assert found is not None


def test_the_reader_names_the_bundle_files_as_the_bundle_does() -> None:
    from kvenv.fetch import bundle, pyzread

    assert (pyzread._INDEX, pyzread._SUMS, pyzread._WHEELS) == (
        bundle.INDEX,
        bundle.SUMS,
        bundle.WHEELS,
    )


def test_a_directory_is_not_a_file_to_write(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    with pytest.raises(InputError, match="--single-file wants a file"):
        make_single_file(project.loaded(), tmp_path, boot=_boot(), cache=tmp_path / "c")


@pytest.mark.parametrize("flag", [None, "flag-cache"])
@pytest.mark.parametrize("variable", [None, "env-cache"])
@pytest.mark.parametrize("paths", [None, "paths-cache"])
def test_the_file_streams_into_the_cache_apply_uses(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: str | None,
    variable: str | None,
    paths: str | None,
) -> None:
    from kvenv.cli.pyzrun import _apply_cache
    from kvenv.model.loading import load_profile
    from kvenv.model.locations import resolve_locations

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("KVENV_CACHE_DIR", raising=False)
    if variable:
        monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / variable))
    profile = local_project(tmp_path / "proj").profile_path
    assert "[paths]" not in profile.read_text()
    if paths:
        profile.write_text(profile.read_text() + f'[paths]\ncache = "{tmp_path / paths}"\n')
    rest = ["--cache", str(tmp_path / flag)] if flag else []
    expected = resolve_locations(
        load_profile(str(profile)).profile, cache=str(tmp_path / flag) if flag else None
    ).cache
    assert _apply_cache(profile, rest) == expected


def test_the_command_line_takes_a_directory_or_a_file_not_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvenv.cli import main

    project = local_project(tmp_path / "proj")
    both = ["bundle", str(project.profile_path), "-o", str(tmp_path / "d")]
    assert main([*both, "--single-file", str(tmp_path / "f.pyz")]) == 2
    assert "either -o DIR (a directory) or --single-file FILE" in capsys.readouterr().err
    made = main(
        ["bundle", str(project.profile_path), "--single-file", str(tmp_path / "f.pyz"),
         "--cache", str(tmp_path / "c"), "--json"]
    )  # fmt: skip
    assert made == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(tmp_path / "f.pyz") and data["artifacts"] == 2
    assert data["requires_python"].startswith("CPython >= 3.")
    assert pyzboot.file_problem(data["path"], data["sha256"]) == (None, data["sha256"])


def test_a_failed_build_leaves_the_old_file_and_no_temporary_one(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    out = tmp_path / "out" / "kvenv-t.pyz"
    out.parent.mkdir()
    out.write_bytes(b"the previous file")
    for wheel in (tmp_path / "proj" / "wheels").glob("*.whl"):
        wheel.unlink()  # the artifacts are nowhere: the bundle cannot be made
    with pytest.raises(KvenvError):
        make_single_file(
            project.loaded(), out, boot=_boot(), cache=tmp_path / "empty", offline=True
        )
    assert out.read_bytes() == b"the previous file"
    assert sorted(p.name for p in out.parent.iterdir()) == ["kvenv-t.pyz"]


def test_a_dry_run_from_the_file_streams_no_wheel(
    built: SingleFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvenv.cli.pyzrun import run_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("KVENV_CACHE_DIR", raising=False)
    cache, root = tmp_path / "cache", tmp_path / "root"
    common = ["--root", str(root), "--cache", str(cache), "--python", sys.executable]
    assert run_file(str(built.path), built.sha256, ["apply", "--dry-run", *common]) == 0
    assert not list(cache.glob("artifacts-v1/sha256/*/*/*.whl"))
    assert run_file(str(built.path), built.sha256, ["apply", *common]) == 0
    assert len(list(cache.glob("artifacts-v1/sha256/*/*/*.whl"))) == 2


def test_fix_commands_name_the_file_while_it_runs_and_kvenv_after(
    built: SingleFile,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kvenv.cli import main
    from kvenv.cli.pyzrun import run_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("KVENV_CACHE_DIR", raising=False)
    common = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "c")]
    assert run_file(str(built.path), built.sha256, ["apply", *common]) == 0
    assert f"{built.path} activate --root {tmp_path / 'root'}" in capsys.readouterr().out
    project = local_project(tmp_path / "proj")
    assert main(["apply", str(project.profile_path), "--root", str(tmp_path / "r2"),
                 "--cache", str(tmp_path / "c")]) == 0  # fmt: skip
    assert f'eval "$(kvenv activate {project.profile_path}' in capsys.readouterr().out
