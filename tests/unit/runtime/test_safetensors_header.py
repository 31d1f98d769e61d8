"""The safetensors header reader: real files, targeted corruptions, hypothesis fuzzing."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from kvenv.runtime.safetensors_header import HeaderError, parse_header, read_header
from kvenv.runtime.shards import inspect_shards
from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.safetensors_files import header_bytes, write_sparse


def _file(tmp_path: Path, tensors: dict[str, np.ndarray], **meta: str) -> Path:
    path = tmp_path / "t.safetensors"
    save_file(tensors, str(path), metadata=meta or None)
    return path


def _raw(document: object, data: bytes = b"") -> bytes:
    head = json.dumps(document).encode()
    return struct.pack("<Q", len(head)) + head + data


def _parse(document: object, data_size: int) -> None:
    head = json.dumps(document).encode()
    parse_header(head, file_size=8 + len(head) + data_size)


def test_real_file_round_trip(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        {
            "a": np.zeros((2, 3), np.float16),
            "b": np.zeros((0,), np.float32),
            "c": np.array(7, np.int64),
            "d": np.zeros((4,), np.bool_),
        },
        note="hi",
    )
    header = read_header(path)
    by_name = {t.name: t for t in header.tensors}
    assert by_name["a"].dtype == "F16" and by_name["a"].shape == (2, 3)
    assert by_name["a"].nbytes == 12
    assert by_name["b"].shape == (0,) and by_name["b"].nbytes == 0
    assert by_name["c"].shape == () and by_name["c"].nbytes == 8
    assert by_name["d"].dtype == "BOOL"
    assert header.metadata == {"note": "hi"}
    assert header.tensor_bytes == 12 + 8 + 4
    assert header.bytes_by_dtype() == {"BOOL": 4, "F16": 12, "F32": 0, "I64": 8}
    assert header.file_size == path.stat().st_size


def test_empty_file_header(tmp_path: Path) -> None:
    header = read_header(_file(tmp_path, {}))
    assert header.tensors == () and header.metadata is None


def test_sparse_writer_matches_the_reader(tmp_path: Path) -> None:
    tensors = {"x": ("BF16", [4, 4]), "y": ("F32", [3]), "z": ("F4", [2, 4])}
    size = write_sparse(tmp_path / "s.safetensors", tensors)
    header = read_header(tmp_path / "s.safetensors")
    assert header.file_size == size
    assert [(t.name, t.dtype, list(t.shape)) for t in header.tensors] == [
        (n, d, s) for n, (d, s) in tensors.items()
    ]
    assert len(header_bytes(tensors)) % 8 == 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "shorter than the 8-byte"),
        (b"\x01\x00", "shorter than the 8-byte"),
        (struct.pack("<Q", 200_000_000) + b"{}", "exceeds the 100000000-byte limit"),
        (struct.pack("<Q", 50) + b"{}", "runs past the end"),
        (struct.pack("<Q", 2) + b"[]", "does not start with '{'"),
        (struct.pack("<Q", 3) + b"{\xff}", "not UTF-8"),
        (struct.pack("<Q", 3) + b"{x}", "not valid JSON"),
        (struct.pack("<Q", 2) + b"{}" + b"\x00", "trailing bytes"),
    ],
)
def test_broken_framing(tmp_path: Path, raw: bytes, message: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(HeaderError, match=message):
        read_header(path)


T = {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}


@pytest.mark.parametrize(
    ("document", "data_size", "message", "where"),
    [
        ({"a": "x"}, 0, "must be an object", '$["a"]'),
        ({"a": {"dtype": "F16", "shape": [1]}}, 2, "lacks data_offsets", '$["a"]'),
        ({"a": {**T, "dtype": "F17"}}, 4, "unknown dtype 'F17'", '$["a"].dtype'),
        ({"a": {**T, "shape": [-1]}}, 4, "non-negative integers", '$["a"].shape'),
        ({"a": {**T, "shape": [True]}}, 4, "non-negative integers", '$["a"].shape'),
        ({"a": {**T, "shape": "2"}}, 4, "non-negative integers", '$["a"].shape'),
        ({"a": {**T, "data_offsets": [4, 0]}}, 4, "before begin", '$["a"].data_offsets'),
        ({"a": {**T, "data_offsets": [0]}}, 4, "two non-negative", '$["a"].data_offsets'),
        ({"a": {**T, "data_offsets": [0, 8]}}, 4, "past the 4-byte", '$["a"].data_offsets'),
        ({"a": {**T, "data_offsets": [0, 2]}}, 4, "needs 4 bytes", '$["a"].data_offsets'),
        (
            {"a": T, "b": {**T, "data_offsets": [2, 6]}},
            8,
            "overlaps tensor 'a'",
            '$["b"].data_offsets',
        ),
        ({"a": {**T, "data_offsets": [2, 6]}}, 6, "unreferenced bytes", '$["a"].data_offsets'),
        ({"__metadata__": {"k": 1}}, 0, "must be strings", "$.__metadata__.k"),
        ({"__metadata__": [1]}, 0, "object of strings", "$.__metadata__"),
    ],
)
def test_broken_entries(document: dict, data_size: int, message: str, where: str) -> None:
    with pytest.raises(HeaderError, match=message) as info:
        _parse(document, data_size)
    assert info.value.path == where


def test_duplicate_tensor_names() -> None:
    head = (
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    )
    with pytest.raises(HeaderError, match="'a' appears twice"):
        parse_header(head, file_size=8 + len(head) + 2)


def test_deeply_nested_json() -> None:
    head = b"{" + b'"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(HeaderError):
        parse_header(head, file_size=8 + len(head))


_VALID = _raw(
    {
        "w": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
        "__metadata__": {"format": "pt"},
    },
    b"\x00" * 12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6
    ),
    st.integers(0, len(_VALID)),
)
def test_mutated_bytes_never_crash(edits: list[tuple[int, int]], cut: int) -> None:
    raw = bytearray(_VALID)
    for position, value in edits:
        raw[position] = value
    raw = raw[: max(cut, 1)] if cut < len(_VALID) // 2 else raw
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.safetensors"
        path.write_bytes(bytes(raw))
        try:
            header = read_header(path)
        except HeaderError as exc:
            assert exc.message and exc.path.startswith("$")
            return
    data_size = header.file_size - 8 - header.header_size
    spans = sorted((t.begin, t.end) for t in header.tensors)
    assert all(0 <= b <= e <= data_size for b, e in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_ENTRY = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F16", "BF16", "U8", "F4", "F6_E2M3", "X"]) | _JSON,
        "shape": st.lists(st.integers(-2, 5), max_size=3) | _JSON,
        "data_offsets": st.lists(st.integers(-2, 40), min_size=0, max_size=3) | _JSON,
    }
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text(max_size=6), _ENTRY | _JSON, max_size=4),
    st.integers(0, 64),
)
def test_random_headers_give_clear_errors(document: dict, data_size: int) -> None:
    try:
        _parse(document, data_size)
    except HeaderError as exc:
        assert exc.message
    except ValueError as exc:  # json.dumps of NaN is valid Python JSON; never anything else
        pytest.fail(f"unexpected {exc!r}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=64), st.integers(0, 80))
def test_inspect_reports_a_corrupt_shard_never_crashes(junk: bytes, offset: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tp_checkpoint(Path(tmp) / "c", 2)
        target = root / "model-rank-1-part-0.safetensors"
        raw = bytearray(target.read_bytes())
        raw[offset : offset + len(junk)] = junk
        target.write_bytes(bytes(raw))
        result = inspect_shards(root, tensor_parallel_size=2)
        json.dumps(result.to_json())
        if not result.valid:
            assert result.errors
            assert all(p.render() for p in result.errors)
            return
        # Still valid: the damage missed the header, or left one holding the same tensors.
        damaged = read_header(target)
        intact = read_header(root / "model-rank-0-part-0.safetensors")
        assert [(t.name, t.shape) for t in damaged.tensors] == [
            (t.name, t.shape) for t in intact.tensors
        ]
