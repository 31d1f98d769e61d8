"""Hermetic integration tests of ``kvenv lock``: small real wheels in a local wheelhouse and on
a loopback simple index, resolved for a cp312 manylinux x86_64 target from this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.pylock import Pylock

from kvenv.cli import main
from kvenv.errors import ConflictError, FetchError
from kvenv.lock.engine import LockOptions, lock_profile, parse_exclude_newer
from kvenv.lock.sources import IndexConfig, index_config
from kvenv.model.loading import LoadedProfile
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    serve_index,
    write_project,
)
from tests.support.wheels import build_wheel


def house_opts(house: Path, tmp_path: Path, **kw: Any) -> LockOptions:
    config = IndexConfig(find_links=(str(house),), no_index=True)
    return LockOptions(index=config, cache_dir=tmp_path / "cache", **kw)


def lock_doc(loaded: LoadedProfile, options: LockOptions) -> dict[str, Any]:
    result = lock_profile(loaded, options)
    return tomllib.loads(result.text)


def is_native(package: dict[str, Any]) -> bool:
    return bool(package.get("tool", {}).get("kvenv", {}).get("native"))


def versions(doc: dict[str, Any]) -> dict[str, str]:
    """The overlay's packages (the native wheel, recorded beside them, left out)."""
    return {p["name"]: p["version"] for p in doc["packages"] if not is_native(p)}


def test_locks_the_closure_for_the_target(tmp_path: Path) -> None:
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH, {"name": "filelock"}])
    house = basic_house(tmp_path / "house")
    doc = lock_doc(loaded, house_opts(house, tmp_path))
    Pylock.from_dict(doc).validate()
    # six only because the target is 3.12 (this machine is not); gamma is Windows-only;
    # beta 2.2.0 needs glibc 2.39; delta 1.6.0 is cp311-only; beta[fast] pulls delta
    assert versions(doc) == {"alpha": "1.0.0", "beta": "2.1.0", "delta": "1.5.0", "six": "1.17.0"}
    beta = next(p for p in doc["packages"] if p["name"] == "beta")
    assert beta["tool"]["kvenv"]["extras"] == ["fast"]
    assert beta["wheels"][0]["name"].endswith("manylinux_2_17_x86_64.whl")
    six = next(p for p in doc["packages"] if p["name"] == "six")
    assert six["marker"] == 'python_version > "3.11"'
    for package in doc["packages"]:
        wheel = package["wheels"][0]
        assert len(wheel["hashes"]["sha256"]) == 64 and wheel["size"] > 0
    assert "torch" not in versions(doc)
    tool = doc["tool"]["kvenv"]
    assert tool["native"]["requires"] == ["torch==2.10.0", "alpha>=1.0"]
    (native,) = [p for p in doc["packages"] if is_native(p)]  # recorded as a package of its own
    assert (native["name"], native["version"]) == ("nativepkg", "1.0.0+cu128")
    assert native["wheels"][0]["hashes"]["sha256"] == tool["native"]["sha256"]
    assert native["wheels"][0]["path"] == "../wheels/" + native["wheels"][0]["name"]
    assert native["wheels"][0]["name"].startswith("nativepkg-1.0.0+cu128-")
    assert native["tool"]["kvenv"]["requires"] == ["torch==2.10.0", "alpha>=1.0"]
    assert tool["native"]["requires-from"] == "wheel"
    assert doc["environments"] and doc["requires-python"] == "==3.12.*"


def test_the_native_package_lists_its_dependencies_like_any_other(tmp_path: Path) -> None:
    """The native's own ``dependencies`` (PEP 751) name the locked packages it requires (the
    host's torch is not in the lock, so not among them), and ``packaging.pylock`` reads them."""
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH, {"name": "filelock"}])
    house = basic_house(tmp_path / "house")
    doc = lock_doc(loaded, house_opts(house, tmp_path))
    (native,) = [p for p in doc["packages"] if is_native(p)]
    assert native["dependencies"] == [{"name": "alpha"}]
    alpha = next(p for p in doc["packages"] if p["name"] == "alpha")
    assert {d["name"] for d in alpha["dependencies"]} == {"beta", "six"}
    lock = Pylock.from_dict(doc)
    lock.validate()
    (read,) = [p for p in lock.packages if p.name == "nativepkg"]
    assert [d.get("name") for d in read.dependencies or ()] == ["alpha"]


def test_a_newer_target_glibc_takes_the_newer_wheel(tmp_path: Path) -> None:
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH], glibc="2.39")
    house = basic_house(tmp_path / "house")
    assert versions(lock_doc(loaded, house_opts(house, tmp_path)))["beta"] == "2.2.0"


def test_protected_host_torch_owns_its_subtree(tmp_path: Path) -> None:
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    assert not [n for n in versions(doc) if n.startswith("nvidia")]
    assert "filelock" not in versions(doc)  # what only the protected torch needs is the host's


def test_host_cpu_torch_uses_its_own_requirements_not_the_indexs(tmp_path: Path) -> None:
    # unprotected: the host's CPU torch satisfies torch==2.10.0 and brings its own
    # Requires-Dist (filelock), not the CUDA build's nvidia-* libraries
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH], protected=())
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    assert "torch" not in versions(doc)
    assert not [n for n in versions(doc) if n.startswith("nvidia")]
    assert versions(doc)["filelock"] == "3.16.1"


def test_unprotected_torch_from_the_index_drags_its_cuda_libraries(tmp_path: Path) -> None:
    loaded = write_project(tmp_path / "p", protected=(), native_requires=["torch>=2.11"])
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    assert versions(doc)["torch"] == "2.13.0"
    assert versions(doc)["nvidia-cublas-cu12"] == "12.9.1"


def test_protected_conflict_explains_the_chain(tmp_path: Path) -> None:
    host = [{"name": "torch", "version": "2.10.0+cu128"}]
    loaded = write_project(tmp_path / "p", distributions=host, native_requires=["torch==2.13.0"])
    with pytest.raises(ConflictError) as info:
        lock_profile(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    text = info.value.render()
    assert "nativepkg 1.0.0+cu128 requires torch==2.13.0" in text
    assert "the host provides torch 2.10.0+cu128, which is protected" in text
    assert "waive" in text and "native build" in text and "profile" in text


def test_smuggled_protected_names_are_still_protected(tmp_path: Path) -> None:
    host = [{"name": "torch", "version": "2.10.0+cu128"}]
    loaded = write_project(tmp_path / "p", distributions=host, native_requires=["Torch==2.13.0"])
    with pytest.raises(ConflictError, match="which is protected"):
        lock_profile(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))


def test_no_wheel_for_the_target_names_the_versions_tried(tmp_path: Path) -> None:
    house = tmp_path / "house"
    build_wheel(house, "winonly", "1.0", tag="cp312-cp312-win_amd64")
    build_wheel(house, "winonly", "1.1", tag="cp311-cp311-manylinux_2_17_x86_64")
    loaded = write_project(tmp_path / "p", native_requires=["winonly"])
    with pytest.raises(ConflictError) as info:
        lock_profile(loaded, house_opts(house, tmp_path))
    text = info.value.render()
    assert "no wheel of winonly installs on" in text
    assert "1.1, 1.0" in text


def test_waivers_drop_requirements_and_are_recorded(tmp_path: Path) -> None:
    loaded = write_project(
        tmp_path / "p",
        distributions=[HOST_TORCH],
        native_requires=["torch==2.10.0", "alpha>=1.0", "missingpkg>=3"],
        waivers=[("missingpkg", "the host ships it under another name")],
    )
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    (waiver,) = doc["tool"]["kvenv"]["waivers"]
    assert waiver["name"] == "missingpkg"
    assert waiver["dropped"] == ["missingpkg>=3 (required by nativepkg 1.0.0+cu128)"]


def test_host_versions_are_preferred_unknown_ones_assumed_old_ones_shadowed(
    tmp_path: Path,
) -> None:
    host = [HOST_TORCH, {"name": "six"}, {"name": "beta", "version": "1.0.0"}]
    loaded = write_project(tmp_path / "p", distributions=host)
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    assert "six" not in versions(doc)
    tool = doc["tool"]["kvenv"]
    assert {"name": "six", "requirement": "six>=1.16", "required-by": "alpha 1.0.0"} in tool[
        "assumptions"
    ]
    assert tool["shadows"] == [
        {"name": "beta", "host-version": "1.0.0", "overlay-version": "2.1.0"}
    ]


def test_host_version_that_satisfies_is_kept(tmp_path: Path) -> None:
    host = [HOST_TORCH, {"name": "beta", "version": "2.0.0", "requires": []}]
    loaded = write_project(tmp_path / "p", distributions=host)
    doc = lock_doc(loaded, house_opts(basic_house(tmp_path / "house"), tmp_path))
    assert "beta" not in versions(doc)


def test_same_inputs_give_a_byte_identical_lock(tmp_path: Path) -> None:
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    house = basic_house(tmp_path / "house")
    first = lock_profile(loaded, house_opts(house, tmp_path)).text
    other = LockOptions(index=house_opts(house, tmp_path).index, cache_dir=tmp_path / "c2")
    second = lock_profile(loaded, other).text
    assert first == second


def test_offline_after_one_online_lock(tmp_path: Path) -> None:
    house = basic_house(tmp_path / "house")
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    with serve_index(house) as url:
        config = IndexConfig(index_url=url)
        online = lock_profile(loaded, LockOptions(index=config, cache_dir=tmp_path / "c")).text
    offline = lock_profile(
        loaded, LockOptions(index=config, cache_dir=tmp_path / "c", offline=True)
    ).text
    assert offline == online
    with pytest.raises(FetchError, match="offline"):
        lock_profile(loaded, LockOptions(index=config, cache_dir=tmp_path / "c3", offline=True))


@pytest.mark.parametrize(
    ("json_api", "pep658", "hashes"),
    [(True, True, True), (False, True, True), (False, False, True), (False, False, False)],
)
def test_loopback_index_variants(
    tmp_path: Path, json_api: bool, pep658: bool, hashes: bool
) -> None:
    house = basic_house(tmp_path / "house")
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    expected = versions(lock_doc(loaded, house_opts(house, tmp_path)))
    with serve_index(house, json_api=json_api, pep658=pep658, hashes=hashes) as url:
        options = LockOptions(
            index=IndexConfig(index_url=url), cache_dir=tmp_path / "c", portable=False
        )
        doc = lock_doc(loaded, options)
    assert versions(doc) == expected
    for package in [p for p in doc["packages"] if not is_native(p)]:
        wheel = package["wheels"][0]
        assert wheel["url"].startswith(url.replace("/simple/", "/files/"))
        local = house / wheel["name"]
        assert wheel["size"] == local.stat().st_size
        assert package["index"] == url
        if json_api:
            assert "upload-time" in wheel


def test_exclude_newer_ignores_later_uploads(tmp_path: Path) -> None:
    house = basic_house(tmp_path / "house")
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "alpha"]
    )
    alpha = "alpha-1.0.0-py3-none-any.whl"
    with serve_index(house) as url:
        import tests.support.lockenv as support

        support._Handler.upload_times = {alpha: "2026-03-01T00:00:00Z"}
        try:
            options = LockOptions(
                index=IndexConfig(index_url=url),
                cache_dir=tmp_path / "c",
                exclude_newer=parse_exclude_newer("2026-01-01"),
            )
            doc = lock_doc(loaded, options)
        finally:
            support._Handler.upload_times = {}
    assert versions(doc)["alpha"] == "0.9.0"
    assert doc["tool"]["kvenv"]["exclude-newer"] == "2026-01-01T00:00:00+00:00"


def test_index_environment_variables_are_honoured() -> None:
    env = {
        "PIP_INDEX_URL": "https://pip.invalid/simple",
        "UV_DEFAULT_INDEX": "https://uv.invalid/simple",
        "UV_INDEX": "team=https://team.invalid/simple",
        "PIP_EXTRA_INDEX_URL": "https://extra.invalid/simple https://extra2.invalid/simple",
        "UV_FIND_LINKS": "/wheels/a,/wheels/b",
        "PIP_FIND_LINKS": "/wheels/c",
    }
    config = index_config(environ=env)
    assert config.index_url == "https://uv.invalid/simple/"
    assert config.extra_index_urls == (
        "https://team.invalid/simple/",
        "https://extra.invalid/simple/",
        "https://extra2.invalid/simple/",
    )
    assert config.find_links == ("/wheels/a", "/wheels/b", "/wheels/c")
    assert index_config(index_url="https://flag.invalid/s", environ=env).index_url == (
        "https://flag.invalid/s/"
    )


def test_cli_writes_the_lock_and_reports_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    basic_house(root / "house")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] is True
    assert {p["name"] for p in report["packages"]} == {"alpha", "beta", "delta", "six"}
    lock = root / "locks" / "pylock.testbox.toml"
    assert lock.is_file()
    wheel_path = tomllib.loads(lock.read_text())["packages"][0]["wheels"][0]["path"]
    assert wheel_path.startswith("../house/")
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    assert "unchanged" in capsys.readouterr().out


def test_cli_conflict_exits_3_and_keeps_the_previous_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    basic_house(root / "house")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    before = (root / "locks" / "pylock.testbox.toml").read_bytes()
    (root / "reqs.txt").write_text("alpha<0.5\n")
    argv = ["lock", "testbox", "--find-links", "house", "--no-index", "--require", "reqs.txt"]
    assert main(argv) == 3
    assert "alpha" in capsys.readouterr().err
    assert (root / "locks" / "pylock.testbox.toml").read_bytes() == before


def test_native_requires_file_and_reuse_from_the_previous_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    basic_house(root / "house")
    (root / "native-reqs.txt").write_text(
        "# the wheel's own list\nbeta>=2 \\\n  ; python_version >= '3.12'\n"
    )
    monkeypatch.chdir(root)
    base = ["lock", "testbox", "--find-links", "house", "--no-index"]
    assert main([*base, "--native-requires", "native-reqs.txt"]) == 0
    lock = root / "locks" / "pylock.testbox.toml"
    first = lock.read_text()
    native = tomllib.loads(first)["tool"]["kvenv"]["native"]
    assert native["requires-from"] == "file native-reqs.txt"
    assert set(versions(tomllib.loads(first))) == {"beta"}
    # the native wheel's file disappears: the recorded requirements serve
    for wheel in (root / "native").iterdir():
        wheel.unlink()
    assert main(base) == 0
    assert lock.read_text() == first


def test_bad_requirement_file_is_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    (root / "bad.txt").write_text("alpha >>> 1\n-r other.txt\n")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--no-index", "--require", "bad.txt"]) == 2
    err = capsys.readouterr().err
    assert "bad.txt: line 1" in err and "bad.txt: line 2" in err
    assert "Traceback" not in err
