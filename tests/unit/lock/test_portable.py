"""Portable (host-neutral) locks: index wheels by ``path`` into the project's ``wheels/``, no
``url`` or ``index``; fetched from a loopback index by file name and sha256, from a pre-filled
wheelhouse, or from a bundle with no network at all."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.pylock import Pylock

from kvenv._util.urls import allow_loopback_http
from kvenv.cli import main
from kvenv.errors import FetchError, IntegrityError
from kvenv.fetch import fetch_all
from kvenv.fetch.bundle import make_bundle, open_bundle
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.pylock import write_lock
from kvenv.lock.sources import IndexConfig
from kvenv.model.loading import LoadedProfile
from kvenv.plan.artifacts import Artifact, artifacts_for
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    isolate_index_env,
    serve_index,
    write_project,
)
from tests.support.wheels import build_wheel, sha256_of


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The conftest's isolation with the lock's cache apart from ``<tmp_path>/cache``, which
    these tests give ``fetch_all`` and ``make_bundle`` empty: what a lock cached never serves
    their downloads."""
    isolate_index_env(monkeypatch, tmp_path / "lock-cache")


@pytest.fixture
def house(tmp_path: Path) -> Path:
    return basic_house(tmp_path / "house")


@pytest.fixture
def index(house: Path) -> Iterator[str]:
    with serve_index(house) as url, allow_loopback_http():
        yield url


def _lock(loaded: LoadedProfile, url: str, tmp_path: Path, **kw: Any) -> str:
    options = LockOptions(index=IndexConfig(index_url=url), cache_dir=tmp_path / "c", **kw)
    result = lock_profile(loaded, options)
    write_lock(result.path, result.text)
    return result.text


@pytest.fixture
def project(tmp_path: Path, index: str) -> LoadedProfile:
    loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
    _lock(loaded, index, tmp_path)
    return loaded


def _overlay(loaded: LoadedProfile) -> list[Artifact]:
    return [a for a in artifacts_for(loaded, loaded.lock_path) if a.role == "overlay"]


def test_portable_lock_names_no_index_and_is_a_valid_pylock(
    project: LoadedProfile, index: str, house: Path
) -> None:
    text = project.lock_path.read_text()
    doc = tomllib.loads(text)
    Pylock.from_dict(doc).validate()
    assert doc["tool"]["kvenv"]["portable"] is True
    assert "127.0.0.1" not in text and "url =" not in text and "index =" not in text
    assert {p["name"] for p in doc["packages"]} == {"alpha", "beta", "delta", "nativepkg", "six"}
    (native,) = [p for p in doc["packages"] if p["tool"]["kvenv"].get("native")]
    assert native["wheels"][0]["path"] == f"../wheels/{native['wheels'][0]['name']}"
    for package in [p for p in doc["packages"] if p is not native]:
        wheel = package["wheels"][0]
        assert "index" not in package and "url" not in wheel
        assert wheel["path"] == f"../wheels/{wheel['name']}"
        assert wheel["size"] == (house / wheel["name"]).stat().st_size
        assert wheel["hashes"]["sha256"] == sha256_of(house / wheel["name"])
        assert "upload-time" in wheel
    # A wheelhouse (find-links) wheel keeps its own path, portable or not.
    local = write_project(project.base_dir.parent / "q", distributions=[HOST_TORCH])
    options = LockOptions(index=IndexConfig(find_links=(str(house),), no_index=True))
    paths = {
        p["wheels"][0]["path"]
        for p in tomllib.loads(lock_profile(local, options).text)["packages"]
        if not p["tool"]["kvenv"].get("native")
    }
    assert all(path.startswith("../../house/") for path in paths)


def test_rerun_keeps_portable_and_is_byte_identical(
    project: LoadedProfile, index: str, tmp_path: Path
) -> None:
    first = project.lock_path.read_text()
    assert _lock(project, index, tmp_path) == first  # recorded choice reused
    assert _lock(project, index, tmp_path, portable=True) == first
    urls = _lock(project, index, tmp_path, portable=False)
    assert "portable" not in urls and f'index = "{index}"' in urls
    assert _lock(project, index, tmp_path) == urls  # the URL form is kept too
    assert _lock(project, index, tmp_path, portable=True) == first


def test_check_accepts_portable_and_refuses_a_half_portable_lock(
    project: LoadedProfile, index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = str(project.path)
    assert main(["lock", profile, "--check"]) == 0
    text = project.lock_path.read_text()
    name = tomllib.loads(text)["packages"][0]["wheels"][0]["name"]
    bad = text.replace(
        f'path = "../wheels/{name}"', f'url = "{index.replace("/simple/", "/files/")}{name}"'
    )
    assert bad != text
    project.lock_path.write_text(bad)
    capsys.readouterr()
    assert main(["lock", profile, "--check"]) == 1
    assert "a portable lock gives each wheel a path and no url" in capsys.readouterr().err


def test_fetch_finds_missing_wheels_on_the_index_by_file_name(
    project: LoadedProfile, index: str, house: Path, tmp_path: Path
) -> None:
    overlay = _overlay(project)
    assert overlay and all(a.index_fallback and not Path(str(a.source)).exists() for a in overlay)
    got = fetch_all(overlay, cache=tmp_path / "cache", index_urls=[index])
    for artifact in overlay:
        assert got[artifact.sha256].read_bytes() == (house / str(artifact.filename)).read_bytes()


def test_fetch_uses_the_index_environment_like_kvenv_lock(
    project: LoadedProfile, index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index)
    overlay = _overlay(project)
    got = fetch_all(overlay, cache=tmp_path / "cache")
    assert {sha256_of(path) for path in got.values()} == {a.sha256 for a in overlay}


@pytest.mark.parametrize("published", [True, False])
def test_a_different_file_under_the_same_name_is_refused_and_never_cached(
    project: LoadedProfile, tmp_path: Path, published: bool
) -> None:
    alpha = next(a for a in _overlay(project) if a.name == "alpha")
    impostor = tmp_path / "impostor"
    built = build_wheel(impostor, "alpha", "1.0.0", files={"alpha/evil.py": "x = 1\n"})
    assert built.name == alpha.filename and sha256_of(built) != alpha.sha256
    cache = tmp_path / "cache"
    served = serve_index(impostor, hashes=published)
    with served as url, allow_loopback_http(), pytest.raises(IntegrityError):
        fetch_all([alpha], cache=cache, index_urls=[url])
    assert not [p for p in cache.rglob("*") if p.is_file() and p.name == alpha.filename]
    with pytest.raises(FetchError, match="not in the cache"):
        fetch_all([alpha], cache=cache, offline=True)


def test_a_prefilled_wheelhouse_is_used_after_verification(
    project: LoadedProfile, house: Path, tmp_path: Path
) -> None:
    overlay = _overlay(project)
    wheels = project.base_dir / "wheels"
    wheels.mkdir()
    for artifact in overlay:
        shutil.copy(house / str(artifact.filename), wheels)
    got = fetch_all(overlay, cache=tmp_path / "cache", offline=True)
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in overlay}
    beta = next(a for a in overlay if a.name == "beta")
    (wheels / str(beta.filename)).write_bytes(b"not the wheel")
    with pytest.raises(IntegrityError):
        fetch_all([beta], cache=tmp_path / "cache2", offline=True)


def test_offline_and_missing_names_the_file_and_the_way_out(
    project: LoadedProfile, tmp_path: Path
) -> None:
    overlay = _overlay(project)
    with pytest.raises(FetchError) as info:
        fetch_all(overlay, cache=tmp_path / "cache", offline=True)
    text = info.value.render()
    assert all(str(a.filename) in text for a in overlay)
    assert "kvenv bundle" in text and "does not exist" in text


def test_a_bundle_installs_with_no_network(
    project: LoadedProfile,
    index: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "bundle"
    make_bundle(project, out, cache=tmp_path / "cache", index_urls=[index])
    bundled_lock = out / "locks" / "pylock.testbox.toml"
    assert bundled_lock.read_bytes() == project.lock_path.read_bytes()
    info = open_bundle(out)
    # The bundled lock's relative paths resolve inside the bundle.
    for package in tomllib.loads(bundled_lock.read_text())["packages"]:
        path = (bundled_lock.parent / package["wheels"][0]["path"]).resolve()
        assert path.is_file() and sha256_of(path) == package["wheels"][0]["hashes"]["sha256"]

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    artifacts = artifacts_for(project, project.lock_path)
    got = fetch_all(
        artifacts, cache=tmp_path / "fresh", offline=True, bundle=open_bundle(out).local_files()
    )
    assert set(got) == {a.sha256 for a in artifacts}
    assert all(path.is_relative_to(info.root) for path in got.values())
    # The bundled profile and lock on their own: the paths point into the bundle.
    from kvenv.model.loading import load_profile

    inside = load_profile(str(info.profile_path))
    overlay = [a for a in artifacts_for(inside, bundled_lock) if a.role == "overlay"]
    assert all(Path(str(a.source)).is_relative_to(out) for a in overlay)
    got = fetch_all(overlay, cache=tmp_path / "fresh2", offline=True)
    assert set(got) == {a.sha256 for a in overlay}


def test_a_url_lock_is_bundled_with_paths_into_the_bundle(
    project: LoadedProfile, index: str, tmp_path: Path
) -> None:
    _lock(project, index, tmp_path, portable=False)
    out = tmp_path / "bundle"
    make_bundle(project, out, cache=tmp_path / "cache", index_urls=[index])
    text = (out / "locks" / "pylock.testbox.toml").read_text()
    doc = tomllib.loads(text)
    Pylock.from_dict(doc).validate()
    assert "127.0.0.1" not in text
    for package in doc["packages"]:
        assert package["wheels"][0]["path"] == f"../wheels/{package['wheels'][0]['name']}"
    open_bundle(out)
