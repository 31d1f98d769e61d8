"""Streaming sha256: correct digests, clear mismatch errors, constant memory."""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvenv._util.hashing import CHUNK, HashingWriter, copy_hashing, sha256_file, verify_file
from kvenv.errors import IntegrityError


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_digest_and_size_match_hashlib(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == (hashlib.sha256(data).hexdigest(), size)


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), chunk=st.integers(min_value=1, max_value=700))
def test_any_chunk_size_gives_the_same_digest(data: bytes, chunk: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "blob"
        path.write_bytes(data)
        assert sha256_file(path, chunk=chunk) == (hashlib.sha256(data).hexdigest(), len(data))


def test_verify_file_accepts_the_pin_and_names_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "a.whl"
    path.write_bytes(b"hello")
    good = hashlib.sha256(b"hello").hexdigest()
    verify_file(path, good)
    verify_file(path, good.upper() + "\n", 5)
    with pytest.raises(IntegrityError) as info:
        verify_file(path, "0" * 64)
    assert info.value.message == f"sha256 mismatch for {path}: expected {'0' * 64}, got {good}"
    with pytest.raises(IntegrityError, match=r"size mismatch .* expected 6 bytes, got 5"):
        verify_file(path, good, 6)


def test_size_is_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.whl"
    path.write_bytes(b"hello")

    def no_reading(*_: object, **__: object) -> tuple[str, int]:
        raise AssertionError("the file was hashed although its size was wrong")

    monkeypatch.setattr("kvenv._util.hashing.sha256_file", no_reading)
    with pytest.raises(IntegrityError, match="size mismatch"):
        verify_file(path, "0" * 64, 4)


def test_memory_stays_flat_for_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "big"
    with open(path, "wb") as handle:
        for _ in range(24):
            handle.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        sha256_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * CHUNK


def test_hashing_writer_hashes_what_it_writes() -> None:
    raw = io.BytesIO()
    sink = HashingWriter(raw, label="w.whl")
    copy_hashing(io.BytesIO(b"abc" * 100_000), sink, chunk=4096)
    assert raw.getvalue() == b"abc" * 100_000
    assert sink.size == 300_000
    sink.check(hashlib.sha256(b"abc" * 100_000).hexdigest(), 300_000)
    with pytest.raises(IntegrityError, match=r"sha256 mismatch for w\.whl"):
        sink.check("1" * 64)
    with pytest.raises(IntegrityError, match=r"size mismatch for w\.whl"):
        sink.check(sink.hexdigest(), 5)


def test_hashing_writer_stops_at_the_pinned_size() -> None:
    raw = io.BytesIO()
    sink = HashingWriter(raw, limit=10, label="w.whl")
    sink.write(b"x" * 10)
    with pytest.raises(IntegrityError, match="more than the pinned 10 bytes"):
        sink.write(b"y")
    assert raw.getvalue() == b"x" * 10
