"""A sha256 in a mismatch message is shown whole, both the pinned one and the one found."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kvenv.errors import FetchError, IntegrityError
from kvenv.model.profile import IndexSource

PINNED = "0123456789abcdef" + "a" * 48
SERVED = "0123456789abcdef" + "b" * 48  # same first 16 characters: a cut hash hides the change
FILENAME = "helper-2.0-py3-none-any.whl"


class _Finder:
    """A stand-in ``unearth.PackageFinder`` whose index serves one link with ``SERVED``."""

    def __init__(self, **_: Any) -> None:
        pass

    def find_all_packages(self, name: str, **_: Any) -> list[Any]:
        link = SimpleNamespace(
            filename=FILENAME, hashes={"sha256": SERVED}, is_file=False, is_yanked=False
        )
        return [SimpleNamespace(name=name, version="2.0", link=link)]


@pytest.fixture
def finder(monkeypatch: pytest.MonkeyPatch) -> None:
    import unearth

    monkeypatch.setattr(unearth, "PackageFinder", _Finder)


def test_index_serving_another_hash_shows_both_whole(tmp_path: Any) -> None:
    """A loopback index whose page publishes ``SERVED`` for the pinned file name."""
    from kvenv._util.urls import allow_loopback_http
    from kvenv.fetch.locate import Locator
    from kvenv.lock.cache import IndexCache
    from tests.support.lockenv import serve_index
    from tests.support.wheels import build_wheel

    built = build_wheel(tmp_path / "house", "helper", "2.0")
    assert built.name == FILENAME
    with serve_index(tmp_path / "house", sha256_override=SERVED) as url, allow_loopback_http():
        locator = Locator([url], [], IndexCache(tmp_path / "cache"))
        try:
            with pytest.raises(IntegrityError) as info:
                locator.locate("helper", FILENAME, PINNED)
        finally:
            locator.close()
    text = info.value.render()
    assert PINNED in text and SERVED in text and "…" not in text


@pytest.mark.usefixtures("finder")
def test_wheel_not_found_on_the_index_shows_the_whole_hash() -> None:
    from kvenv.fetch.index import find_on_index

    source = IndexSource(kind="index", index_url="https://index.invalid/simple")
    with pytest.raises(FetchError) as info:
        find_on_index("helper", "2.0", PINNED, source)
    assert PINNED in info.value.render()


def test_an_unreachable_index_is_a_clear_error_not_a_traceback(tmp_path: Any) -> None:
    """The real finder against a loopback port nothing listens on: a FetchError naming the
    index (its credentials masked) and the way out, not the HTTP client's exception."""
    import socket

    from kvenv._util.urls import allow_loopback_http
    from kvenv.fetch.index import find_on_index
    from kvenv.fetch.locate import Locator
    from kvenv.lock.cache import IndexCache

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:s3cret@127.0.0.1:{port}/simple"
    source = IndexSource(kind="index", index_url=url)
    with allow_loopback_http():
        with pytest.raises(FetchError) as found:
            find_on_index("helper", "2.0", PINNED, source)
        locator = Locator([url], [], IndexCache(tmp_path / "cache"))
        try:
            with pytest.raises(FetchError) as located:
                locator.locate("helper", FILENAME, PINNED)
        finally:
            locator.close()
    for info in (found, located):
        text = info.value.render()
        assert f"127.0.0.1:{port}" in text and "s3cret" not in text, text
        assert "--offline --from" in text, text


def test_an_index_native_without_index_url_uses_the_environments_index(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A native pinned as ``kind = "index"`` with no ``index_url`` is found on the index the
    environment names (PIP_INDEX_URL), as `kvenv lock` finds it, not on the default index."""
    import hashlib

    from kvenv._util.urls import allow_loopback_http
    from kvenv.fetch.core import fetch_all
    from kvenv.plan.artifacts import Artifact
    from tests.support.lockenv import serve_index
    from tests.support.wheels import build_wheel

    wheel = build_wheel(tmp_path / "house", "nativepkg", "1.0")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    artifact = Artifact(
        "nativepkg", "1.0", None, digest, wheel.stat().st_size, "native", IndexSource("index")
    )
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with serve_index(tmp_path / "house") as url, allow_loopback_http():
        monkeypatch.setenv("PIP_INDEX_URL", url)
        files = fetch_all([artifact], cache=tmp_path / "cache", offline=False)
    assert files[digest].read_bytes() == wheel.read_bytes()
