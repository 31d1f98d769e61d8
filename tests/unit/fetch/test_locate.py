"""Locating a portable lock's wheels (:mod:`kvenv.fetch.locate`) on a loopback index: one page
request per project, all at once, through the page cache ``kvenv lock`` fills, revalidated with
its ETag; the HTML form where JSON is not offered; a published sha256 that is not the pin
refused; a find-links directory; the real index (``-m network``)."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from packaging.utils import canonicalize_name

from kvenv._util.urls import allow_loopback_http
from kvenv.errors import FetchError, IntegrityError
from kvenv.fetch import fetch_all
from kvenv.lock.cache import IndexCache
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.pylock import write_lock
from kvenv.lock.sources import IndexConfig
from kvenv.plan.artifacts import Artifact, artifacts_for
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    isolate_index_env,
    serve_index,
    write_project,
)
from tests.support.wheels import sha256_of

PROJECTS = ("alpha", "beta", "delta", "six")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_index_env(monkeypatch, tmp_path / "lock-cache")


@pytest.fixture
def house(tmp_path: Path) -> Path:
    return basic_house(tmp_path / "house")


def _wanted(house: Path, tmp_path: Path) -> list[Artifact]:
    """As a portable lock gives them: by ``path`` into a wheelhouse that does not exist; two
    wheels of alpha (two versions: one page serves both)."""
    names = ["alpha-1.0.0", "alpha-0.9.0", "beta-1.0.0", "delta-1.5.0", "six-1.17.0"]
    out = []
    for wheel in sorted(house.glob("*.whl")):
        if any(wheel.name.startswith(n + "-") for n in names):
            name, version = wheel.name.split("-")[:2]
            out.append(
                Artifact(
                    name,
                    version,
                    wheel.name,
                    sha256_of(wheel),
                    wheel.stat().st_size,
                    "overlay",
                    tmp_path / "wheels" / wheel.name,
                    index_fallback=True,
                )
            )
    assert len(out) == len(names)
    return out


def _pages(log: list[tuple[str, int]]) -> Counter[tuple[str, int]]:
    return Counter((path, status) for path, status in log if path.startswith("/simple/"))


@pytest.fixture
def served(house: Path) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    log: list[tuple[str, int]] = []
    with serve_index(house, log=log) as url, allow_loopback_http():
        yield url, log


def test_one_page_per_project_asked_for_all_at_once(house: Path, tmp_path: Path) -> None:
    """With one download at a time, the pages are still asked for together: each page request
    is held until another one arrives."""
    meeting = threading.Barrier(2, timeout=10)
    alone: list[str] = []

    def gate(path: str) -> None:
        if path.startswith("/simple/"):
            try:
                meeting.wait()
            except threading.BrokenBarrierError:
                alone.append(path)

    log: list[tuple[str, int]] = []
    wanted = _wanted(house, tmp_path)
    with serve_index(house, log=log, on_request=gate) as url, allow_loopback_http():
        got = fetch_all(wanted, cache=tmp_path / "cache", index_urls=[url], jobs=1)
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in wanted}
    assert not alone
    assert _pages(log) == Counter({(f"/simple/{p}/", 200): 1 for p in PROJECTS})


def test_pages_are_cached_then_revalidated_with_their_etag(
    house: Path, tmp_path: Path, served: tuple[str, list[tuple[str, int]]]
) -> None:
    url, log = served
    cache = tmp_path / "cache"
    wanted = _wanted(house, tmp_path)
    fetch_all(wanted, cache=cache, index_urls=[url])
    assert _pages(log) == Counter({(f"/simple/{p}/", 200): 1 for p in PROJECTS})

    log.clear()
    shutil.rmtree(cache / "artifacts-v1")  # the wheels must be located again
    fetch_all(wanted, cache=cache, index_urls=[url])
    assert not _pages(log)  # fresh pages: no request at all
    assert len([path for path, _ in log if path.startswith("/files/")]) == len(wanted)

    pages = IndexCache(cache)
    for project in PROJECTS:
        head = pages.get_head(f"{url}{project}/")
        assert head is not None and head.etag
        pages.put_head(attrs.evolve(head, fetched_at=0.0))  # stale: revalidate
    log.clear()
    shutil.rmtree(cache / "artifacts-v1")
    got = fetch_all(wanted, cache=cache, index_urls=[url])
    assert _pages(log) == Counter({(f"/simple/{p}/", 304): 1 for p in PROJECTS})
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in wanted}


def test_apply_uses_the_pages_kvenv_lock_fetched(house: Path, tmp_path: Path) -> None:
    log: list[tuple[str, int]] = []
    cache = tmp_path / "cache"
    with serve_index(house, log=log) as url, allow_loopback_http():
        loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
        options = LockOptions(index=IndexConfig(index_url=url), cache_dir=cache)
        result = lock_profile(loaded, options)
        write_lock(result.path, result.text)
        overlay = [a for a in artifacts_for(loaded, loaded.lock_path) if a.role == "overlay"]
        assert overlay and all(a.index_fallback for a in overlay)
        log.clear()
        got = fetch_all(overlay, cache=cache, index_urls=[url])
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in overlay}
    assert not _pages(log)
    assert len([path for path, _ in log if path.startswith("/files/")]) == len(overlay)


@pytest.mark.parametrize("json_api", [True, False], ids=["json", "html"])
def test_each_page_form_is_read_and_a_published_digest_is_held_to_the_pin(
    house: Path, tmp_path: Path, json_api: bool
) -> None:
    wanted = _wanted(house, tmp_path)
    log: list[tuple[str, int]] = []
    with serve_index(house, json_api=json_api, log=log) as url, allow_loopback_http():
        got = fetch_all(wanted, cache=tmp_path / "cache", index_urls=[url])
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in wanted}
    head = IndexCache(tmp_path / "cache").get_head(f"{url}alpha/")
    assert head is not None
    assert head.content_type.startswith(
        "application/vnd.pypi.simple.v1+json" if json_api else "text/html"
    )

    other = "f" * 64
    cache = tmp_path / "cache2"
    with (
        serve_index(house, json_api=json_api, sha256_override=other) as url,
        allow_loopback_http(),
        pytest.raises(IntegrityError) as info,
    ):
        fetch_all(wanted[:1], cache=cache, index_urls=[url])
    assert other in info.value.render() and wanted[0].sha256 in info.value.render()
    assert not list((cache / "artifacts-v1").rglob("*.whl"))


def test_a_find_links_directory_and_a_missing_file(house: Path, tmp_path: Path) -> None:
    wanted = _wanted(house, tmp_path)
    got = fetch_all(wanted, cache=tmp_path / "cache", find_links=[str(house)])
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in wanted}

    missing = attrs.evolve(wanted[0], filename="alpha-7.0-py3-none-any.whl")
    with pytest.raises(FetchError, match=r"alpha-7\.0-py3-none-any\.whl not found"):
        fetch_all([missing], cache=tmp_path / "cache-2", find_links=[str(house)])


@pytest.mark.network
def test_the_committed_lock_installs_from_the_real_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The built-in Kaggle lock (written before locks could name URLs: paths only) is located
    on the default index, in its JSON form; its smallest wheels are fetched and verified."""
    from kvenv.model.loading import load_profile

    monkeypatch.chdir(tmp_path)  # no project wheelhouse at hand
    loaded = load_profile("kaggle-t4x2-cu128")
    overlay = [a for a in artifacts_for(loaded, loaded.lock_path) if a.role == "overlay"]
    assert all(a.index_fallback for a in overlay)
    small = sorted(overlay, key=lambda a: a.size or 0)[:5]
    small = [attrs.evolve(a, source=tmp_path / "wheels" / str(a.filename)) for a in small]
    cache = tmp_path / "cache"
    got = fetch_all(small, cache=cache)
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in small}
    index = IndexConfig().index_urls()[0]
    pages = IndexCache(cache)
    for artifact in small:
        head = pages.get_head(f"{index.rstrip('/')}/{canonicalize_name(artifact.name)}/")
        assert head is not None, artifact.name
        assert head.content_type.startswith("application/vnd.pypi.simple.v1+json")
    # Stale pages are revalidated: where the index sends validators it answers 304, so only
    # the heads are rewritten (a mirror without them sends the page again).
    heads = {}
    for artifact in small:
        url = f"{index.rstrip('/')}/{canonicalize_name(artifact.name)}/"
        head = pages.get_head(url)
        assert head is not None
        heads[url] = head
        pages.put_head(attrs.evolve(head, fetched_at=0.0))
    bodies = {p: p.stat().st_mtime_ns for p in pages.root.glob("pages-v1/*/*.body")}
    shutil.rmtree(cache / "artifacts-v1")
    again = fetch_all(small, cache=cache)
    assert {sha256_of(p) for p in again.values()} == {a.sha256 for a in small}
    for url in heads:
        fresh = pages.get_head(url)
        assert fresh is not None and fresh.fetched_at > 0.0
    if all(h.etag or h.last_modified for h in heads.values()):
        assert {p: p.stat().st_mtime_ns for p in pages.root.glob("pages-v1/*/*.body")} == bodies


def test_a_page_cache_that_cannot_be_written_is_a_clear_error(
    house: Path, tmp_path: Path, served: tuple[str, list[tuple[str, int]]]
) -> None:
    url, _ = served
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "pages-v1").write_text("a file where the page cache's directory goes")
    with pytest.raises(FetchError, match="cannot keep the index page") as info:
        fetch_all(_wanted(house, tmp_path)[:1], cache=cache, index_urls=[url])
    assert "--cache" in info.value.render()


def test_a_lock_as_kvenv_0_1_0_wrote_it_is_located(house: Path, tmp_path: Path) -> None:
    """kvenv 0.1.0's portable locks: paths and no URLs, and no package entry for the native
    wheel; every overlay wheel is found on the index and verified."""
    cache = tmp_path / "cache"
    with serve_index(house) as url, allow_loopback_http():
        loaded = write_project(tmp_path / "p", distributions=[HOST_TORCH])
        result = lock_profile(loaded, LockOptions(index=IndexConfig(index_url=url)))
        blocks = result.text.split("\n[[packages]]\n")
        old = [b for b in blocks if "native = true" not in b]
        assert len(old) == len(blocks) - 1 and "url =" not in result.text
        write_lock(result.path, "\n[[packages]]\n".join(old))
        overlay = [a for a in artifacts_for(loaded, loaded.lock_path) if a.role == "overlay"]
        assert {a.name for a in overlay} == {"alpha", "beta", "delta", "six"}
        got = fetch_all(overlay, cache=cache, index_urls=[url])
    assert {sha256_of(p) for p in got.values()} == {a.sha256 for a in overlay}
