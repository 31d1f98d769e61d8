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


@pytest.mark.usefixtures("finder")
def test_index_serving_another_hash_shows_both_whole() -> None:
    from kvenv.fetch.index import locate_wheel

    with pytest.raises(IntegrityError) as info:
        locate_wheel("helper", FILENAME, PINNED, index_urls=["https://index.invalid/simple"])
    text = info.value.render()
    assert PINNED in text and SERVED in text and "…" not in text


@pytest.mark.usefixtures("finder")
def test_wheel_not_found_on_the_index_shows_the_whole_hash() -> None:
    from kvenv.fetch.index import find_on_index

    source = IndexSource(kind="index", index_url="https://index.invalid/simple")
    with pytest.raises(FetchError) as info:
        find_on_index("helper", "2.0", PINNED, source)
    assert PINNED in info.value.render()
