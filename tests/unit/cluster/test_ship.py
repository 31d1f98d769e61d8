"""Shipping a bundle in chunks: every chunk and file is checked on arrival before it is used;
a damaged chunk leaves nothing behind. The object store is stood in for by a dict (Ray's
``put``/``get``); the real object store is exercised by tests/cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from kvenv.cluster.ship import RECEIVED_DIR, receive_bundle, received_profile, ship_bundle
from kvenv.errors import IntegrityError
from kvenv.fetch.bundle import make_bundle
from tests.support.applyenv import local_project


class Store:
    """put/get over a dict, as Ray's object store is used by kvenv.cluster.ship."""

    def __init__(self) -> None:
        self.objects: dict[int, bytes] = {}
        self.gets = 0

    def put(self, data: bytes) -> int:
        ref = len(self.objects)
        self.objects[ref] = bytes(data)
        return ref

    def get(self, ref: Any) -> bytes:
        self.gets += 1
        return self.objects[ref]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    project = local_project(tmp_path / "proj")
    make_bundle(project.loaded(), tmp_path / "bundle", cache=tmp_path / "c")
    return tmp_path / "bundle"


def test_a_bundle_arrives_in_bounded_chunks_and_opens_verified(
    bundle: Path, tmp_path: Path
) -> None:
    store = Store()
    shipped = ship_bundle(store, bundle, chunk_size=1000)
    assert max(len(b) for b in store.objects.values()) <= 1000
    assert any(len(f.chunks) > 1 for f in shipped.files)
    received = receive_bundle(store, shipped, tmp_path / "node-cache")
    assert received.root == tmp_path / "node-cache" / RECEIVED_DIR / "t"
    assert received_profile(tmp_path / "node-cache", "t") == received.profile_path
    assert received_profile(tmp_path / "node-cache", None) == received.profile_path
    for rel in received.sums:
        assert (received.root / rel).read_bytes() == (bundle / rel).read_bytes()
    gets = store.gets
    receive_bundle(store, shipped, tmp_path / "node-cache")  # intact copy: nothing shipped again
    assert store.gets == gets


def test_a_damaged_chunk_is_refused_and_nothing_is_left(bundle: Path, tmp_path: Path) -> None:
    store = Store()
    shipped = ship_bundle(store, bundle, chunk_size=1000)
    wheel = next(f for f in shipped.files if f.path.endswith(".whl"))
    ref = wheel.chunks[1].ref
    data = bytearray(store.objects[ref])
    data[0] ^= 0xFF
    store.objects[ref] = bytes(data)
    with pytest.raises(IntegrityError, match="arrived damaged"):
        receive_bundle(store, shipped, tmp_path / "node-cache")
    assert list((tmp_path / "node-cache" / RECEIVED_DIR).iterdir()) == []


def test_a_file_that_does_not_match_its_sum_is_refused(bundle: Path, tmp_path: Path) -> None:
    store = Store()
    shipped = ship_bundle(store, bundle)
    # A sender that lies consistently about a chunk still fails the file's and the bundle's sums.
    wheel = next(f for f in shipped.files if f.path.endswith(".whl"))
    forged = store.put(b"not a wheel")
    import hashlib

    chunk = attrs.evolve(
        wheel.chunks[0], ref=forged, sha256=hashlib.sha256(b"not a wheel").hexdigest(), size=11
    )
    files = tuple(attrs.evolve(f, chunks=(chunk,)) if f is wheel else f for f in shipped.files)
    with pytest.raises(IntegrityError):
        receive_bundle(store, attrs.evolve(shipped, files=files), tmp_path / "node-cache")
    assert list((tmp_path / "node-cache" / RECEIVED_DIR).iterdir()) == []


def test_paths_outside_the_bundle_are_refused(bundle: Path, tmp_path: Path) -> None:
    store = Store()
    shipped = ship_bundle(store, bundle)
    evil = attrs.evolve(shipped.files[0], path="../escape")
    with pytest.raises(IntegrityError, match="outside the bundle"):
        receive_bundle(store, attrs.evolve(shipped, files=(evil,)), tmp_path / "node-cache")
    assert not (tmp_path / "node-cache" / "escape").exists()
