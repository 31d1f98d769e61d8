"""Metadata fetched ahead of the resolver (issue 13): the prefetcher follows the metadata it
fetched down the whole chain of likely candidates, requests run in parallel, and the lock is
the same with and without the prefetch, the page scan and the parsed-page cache."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import kvenv.lock.finder as finder_module
import kvenv.lock.pagescan as pagescan_module
from kvenv.lock.cache import CachedPage, IndexCache
from kvenv.lock.engine import LockOptions, lock_profile
from kvenv.lock.metadata import DistMetadata
from kvenv.lock.pagescan import scan_files
from kvenv.lock.sources import IndexConfig
from kvenv.lock.universe import IndexUniverse
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    serve_index,
    torch_family,
    write_project,
)
from tests.support.wheels import build_wheel

WAIT = 60.0  # a bound for the test's waits, never a measured time


def chain_house(house: Path) -> Path:
    """chain-a needs chain-b needs chain-c needs chain-d[more], whose extra needs chain-e;
    wide-1..3 need nothing."""
    torch_family(house)
    for name, needs in (("a", "b"), ("b", "c"), ("c", "d[more]")):
        build_wheel(house, f"chain-{name}", "1.0.0", requires=[f"chain-{needs}>=1"])
        build_wheel(house, f"chain-{name}", "0.9.0", requires=[f"chain-{needs}>=1"])
    build_wheel(house, "chain-d", "1.0.0", extras={"more": ["chain-e"]})
    build_wheel(house, "chain-e", "1.0.0")
    for i in (1, 2, 3):
        build_wheel(house, f"wide-{i}", "1.0.0")
    return house


def _online(url: str, cache: Path) -> LockOptions:
    return LockOptions(index=IndexConfig(index_url=url), cache_dir=cache, portable=False)


def test_the_chain_is_fetched_before_the_resolver_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first time the resolver asks for any metadata, it waits until the server has been
    asked for the metadata five levels down, the last through an extra: only the prefetcher
    following metadata it parsed can have asked (the resolver has not seen chain-b..e yet)."""
    house = chain_house(tmp_path / "house")
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "chain-a"]
    )
    seen: list[str] = []
    changed = threading.Condition()

    def log(path: str) -> None:
        with changed:
            seen.append(path)
            changed.notify_all()

    asked: list[str] = []
    held: dict[str, bool] = {}
    original = IndexUniverse.metadata

    def metadata(self: IndexUniverse, wheel: Any) -> DistMetadata:
        if not asked:  # the resolver's first question: hold it until chain-d is requested
            with changed:
                held["ok"] = changed.wait_for(
                    lambda: any("chain_e-1.0.0" in p and p.endswith(".metadata") for p in seen),
                    timeout=WAIT,
                )
            held["seen"] = any("chain_b" in p for p in seen)
        asked.append(wheel.filename)
        return original(self, wheel)

    monkeypatch.setattr(IndexUniverse, "metadata", metadata)
    with serve_index(house, on_request=log) as url:
        text = lock_profile(loaded, _online(url, tmp_path / "c")).text
    assert held == {"ok": True, "seen": True}
    assert not any(
        name.startswith(("chain_b", "chain_c", "chain_d", "chain_e")) for name in asked[:1]
    )
    assert "chain-e" in text
    # bounded: one metadata file per wanted project, never every version
    fetched = [p for p in seen if p.endswith(".metadata")]
    assert not any("0.9.0" in p for p in fetched)
    assert len(fetched) == len(set(fetched))


def test_sibling_metadata_is_fetched_in_parallel(tmp_path: Path) -> None:
    """Each metadata request is held until another is in flight beside it (or the bound
    passes): with requests made one at a time, none would ever have company."""
    house = chain_house(tmp_path / "house")
    loaded = write_project(
        tmp_path / "p",
        distributions=[HOST_TORCH],
        native_requires=["torch==2.10.0", "wide-1", "wide-2", "wide-3"],
    )
    state = {"in_flight": 0, "most": 0}
    changed = threading.Condition()

    def gate(path: str) -> None:
        if not path.endswith(".metadata"):
            return
        with changed:
            state["in_flight"] += 1
            state["most"] = max(state["most"], state["in_flight"])
            changed.notify_all()
            changed.wait_for(lambda: state["most"] >= 2, timeout=WAIT)
            state["in_flight"] -= 1

    with serve_index(house, on_request=gate) as url:
        lock_profile(loaded, _online(url, tmp_path / "c"))
    assert state["most"] >= 2


def test_the_lock_is_the_same_with_and_without_the_speedups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    house = chain_house(basic_house(tmp_path / "house"))
    loaded = write_project(
        tmp_path / "p",
        distributions=[HOST_TORCH],
        native_requires=["torch==2.10.0", "alpha>=0.9", "chain-a", "wide-2"],
    )
    with serve_index(house) as url:
        fast = lock_profile(loaded, _online(url, tmp_path / "c1")).text
        warm = lock_profile(loaded, _online(url, tmp_path / "c1")).text  # parsed pages
        with monkeypatch.context() as m:
            m.setattr(IndexUniverse, "follow", lambda self, wanted_by: None)
            m.setattr(pagescan_module, "scan_files", lambda text, keep: None)
            m.setattr(IndexCache, "get_parsed", lambda self, url, key, sha256: None)
            plain = lock_profile(loaded, _online(url, tmp_path / "c2")).text
    assert fast == warm == plain
    assert "chain-d" in fast and "alpha" in fast


def test_a_warm_lock_reads_parsed_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the pages' freshness, a second lock reads neither page bytes nor JSON."""
    house = chain_house(tmp_path / "house")
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "chain-a"]
    )
    with serve_index(house) as url:
        first = lock_profile(loaded, _online(url, tmp_path / "c")).text

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("a page was parsed again")

        with monkeypatch.context() as m:
            m.setattr(IndexCache, "get_body", refuse)
            m.setattr(finder_module.Finder, "_evaluate_json", refuse)
            second = lock_profile(loaded, _online(url, tmp_path / "c")).text
    assert first == second


def test_a_parsed_page_is_bound_to_its_bytes_and_purpose(tmp_path: Path) -> None:
    cache = IndexCache(tmp_path)
    url = "http://127.0.0.1:1/simple/x/"
    head = cache.put_page(CachedPage(url, b'{"files": []}', "application/json", 1.0))
    assert head.sha256 is not None and not head.empty
    cache.put_parsed(url, "key", head.sha256, (("x-1.tar.gz",), ()))
    assert cache.get_parsed(url, "key", head.sha256) == (("x-1.tar.gz",), ())
    assert cache.get_parsed(url, "other key", head.sha256) is None
    changed = cache.put_page(CachedPage(url, b'{"files": [{}]}', "application/json", 2.0))
    assert changed.sha256 is not None
    assert cache.get_parsed(url, "key", changed.sha256) is None
    # a damaged record is a miss, never an error
    next((tmp_path / "parsed-v1").rglob("*.marshal")).write_bytes(b"\x00garbage")
    assert cache.get_parsed(url, "key", head.sha256) is None
    assert cache.get_head(url) == changed
    assert cache.get_body(url) == b'{"files": [{}]}'


def test_a_page_cached_before_heads_had_digests_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    house = chain_house(tmp_path / "house")
    loaded = write_project(
        tmp_path / "p", distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "chain-a"]
    )
    with serve_index(house) as url:
        first = lock_profile(loaded, _online(url, tmp_path / "c")).text
    for head in (tmp_path / "c" / "pages-v1").rglob("*.json"):  # the old head format
        data = json.loads(head.read_text())
        head.write_text(json.dumps({k: v for k, v in data.items() if k not in ("sha256", "empty")}))
    for parsed in (tmp_path / "c" / "parsed-v1").rglob("*.marshal"):
        parsed.unlink()
    offline = LockOptions(
        index=IndexConfig(index_url=url), cache_dir=tmp_path / "c", portable=False, offline=True
    )
    assert lock_profile(loaded, offline).text == first
    assert any((tmp_path / "c" / "parsed-v1").rglob("*.marshal"))


# the page scan ------------------------------------------------------------------------------
def _page(*files: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "x", "files": list(files), **extra})


def _file(filename: str, **fields: Any) -> dict[str, Any]:
    return {
        "core-metadata": {"sha256": "ab" * 32},
        "data-dist-info-metadata": {"sha256": "ab" * 32},
        "filename": filename,
        "hashes": {"sha256": "cd" * 32},
        "url": f"https://files.example/{filename}",
        **fields,
    }


def _wheels(name: str) -> bool:
    return name.endswith(".whl")


def test_the_scan_decodes_only_kept_files_and_lists_every_name() -> None:
    files = [
        _file("x-1.0.tar.gz"),
        _file("x-1.0-py3-none-any.whl", yanked='reason with { and } and {"filename": 1}'),
        _file("x-1.0-cp312-cp312-win_amd64.whl"),
    ]
    for text in (_page(*files), json.dumps(json.loads(_page(*files)), indent=3)):
        scanned = scan_files(text, lambda n: n.endswith("any.whl"))
        assert scanned is not None
        names, kept = scanned
        assert names == [f["filename"] for f in files]
        assert kept == [files[1]]


@pytest.mark.parametrize(
    "text",
    [
        _page(_file("x-1.0-py3-none-any.whl", note="filename")),  # "filename" as a value
        _page(_file("x\\u002d1.0-py3-none-any.whl")),  # an escape in a name
        json.dumps([_file("x-1.0-py3-none-any.whl")]),  # not an object
        _page(_file("x-1.0-py3-none-any.whl"))[:-20] + "}",  # cut short
    ],
    ids=["stray-key", "escaped-name", "not-an-object", "truncated"],
)
def test_the_scan_gives_no_answer_it_cannot_vouch_for(text: str) -> None:
    assert scan_files(text, _wheels) is None


def test_the_scan_handles_repeated_names_in_order() -> None:
    twice = [_file("x-1.0-py3-none-any.whl", size=1), _file("x-1.0-py3-none-any.whl", size=2)]
    scanned = scan_files(_page(*twice), _wheels)
    assert scanned is not None and scanned[1] == twice


# METADATA from a wheel's tail, without zipfile ------------------------------------------------
def _zipfile_answer(path: Path, name: str) -> bytes:
    import zipfile

    from kvenv.lock.metadata import metadata_from_zip

    with zipfile.ZipFile(path) as archive:
        return metadata_from_zip(archive, name, origin=path.name)


def test_the_tail_reader_agrees_with_zipfile(tmp_path: Path) -> None:
    from kvenv.lock.metadata import metadata_from_tail

    many = {f"pkg/m{i}.py": f"x = {i}\n" * 50 for i in range(400)}
    wheels = [
        build_wheel(tmp_path, "plain", "1.0", requires=["six>=1", 'a; extra == "b"']),
        build_wheel(tmp_path, "many-files", "2.0", files=many),
        build_wheel(tmp_path, "Odd.Name_x", "3.0rc1", requires_python=">=3.9"),
    ]
    for path in wheels:
        data = path.read_bytes()
        name = path.name.split("-", 1)[0]
        expected = _zipfile_answer(path, name)
        assert metadata_from_tail(data, len(data), name) == expected
        for size in (64 * 1024, 8 * 1024, 600):
            tail = data[-size:]
            found = metadata_from_tail(tail, len(data), name)
            assert found in (None, expected)  # an answer is the right one, or there is none
        assert metadata_from_tail(data[-64 * 1024 :], len(data), name) == expected or (
            len(data) > 64 * 1024
        )


def test_the_tail_reader_gives_no_answer_it_cannot_vouch_for(tmp_path: Path) -> None:
    from kvenv.lock.metadata import metadata_from_tail

    path = build_wheel(tmp_path, "plain", "1.0", requires=["six>=1"])
    data = path.read_bytes()
    expected = _zipfile_answer(path, "plain")
    assert metadata_from_tail(b"not a zip at all", 16, "plain") is None
    assert metadata_from_tail(b"junk" + data, len(data) + 4, "plain") is None  # a prefix
    # one flipped byte inside the METADATA: the CRC-32 no longer matches
    at = data.index(b"Requires-Dist") if b"Requires-Dist" in data else -1
    if at < 0:  # deflated: flip a byte of the compressed stream instead
        header = data.index(b"plain-1.0.dist-info/METADATA")
        at = header + len("plain-1.0.dist-info/METADATA") + 8
    damaged = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    assert metadata_from_tail(damaged, len(damaged), "plain") != expected
