"""safetensors shards whose headers lie: ``kvenv inspect-shards`` reports each one as invalid
(exit 1, the documented "checkpoint invalid" code) or bad input (exit 2), never a traceback,
never reads past the header, and writes nothing.

The checkpoints are real (written with ``safetensors`` and numpy by
:mod:`tests.fake_vllm.checkpoints`); one shard's header is then replaced by a lying one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.hardening import run_cli, tree_state

SHARD = "model-rank-0-part-0.safetensors"


def _header(path: Path) -> tuple[dict[str, object], bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def _with(document: object, *, pad: bool = True) -> Callable[[Path], object]:
    """Replace the shard's header by ``document`` (tensor data kept)."""

    def write(path: Path) -> None:
        _, data = _header(path)
        text = json.dumps(document).encode()
        if pad:
            text += b" " * (-len(text) % 8)
        path.write_bytes(struct.pack("<Q", len(text)) + text + data)

    return write


def _edit(change: Callable[[dict[str, object]], None]) -> Callable[[Path], object]:
    def write(path: Path) -> None:
        document, _ = _header(path)
        change(document)
        _with(document)(path)

    return write


def _first(document: dict[str, object]) -> dict[str, object]:
    name = next(k for k in document if k != "__metadata__")
    entry = document[name]
    assert isinstance(entry, dict)
    return entry


def _raw(data: bytes) -> Callable[[Path], object]:
    return lambda path: path.write_bytes(data)


def _set_first(key: str, value: object) -> Callable[[Path], object]:
    return _edit(lambda d: _first(d).__setitem__(key, value))


LYING: dict[str, Callable[[Path], object]] = {
    "length-past-eof": lambda p: p.write_bytes(struct.pack("<Q", 1 << 30) + p.read_bytes()[8:]),
    "length-2^64-1": lambda p: p.write_bytes(b"\xff" * 8 + p.read_bytes()[8:]),
    "shorter-than-8": _raw(b"\x01\x00"),
    "empty-file": _raw(b""),
    "not-json": _raw(struct.pack("<Q", 8) + b"{notjson"),
    "not-utf8": _raw(struct.pack("<Q", 8) + b"{\xff\xfe\xfd}   "),
    "json-array": _with([1, 2, 3]),
    "offsets-past-end": _set_first("data_offsets", [0, 1 << 40]),
    "offsets-reversed": _set_first("data_offsets", [16, 0]),
    "offsets-negative": _set_first("data_offsets", [-8, 8]),
    "offsets-not-ints": _set_first("data_offsets", ["0", "8"]),
    "offsets-float": _set_first("data_offsets", [0.0, 8.5]),
    "shape-lies": _set_first("shape", [1 << 20, 1 << 20]),
    "shape-negative": _set_first("shape", [-1, 8]),
    "shape-not-list": _set_first("shape", "8x8"),
    "dtype-unknown": _set_first("dtype", "F128"),
    "dtype-not-string": _set_first("dtype", 16),
    "entry-not-object": _edit(lambda d: d.update({next(iter(d)): "x"})),
    "metadata-not-strings": _edit(lambda d: d.update({"__metadata__": {"a": 1}})),
    "overlapping": _edit(lambda d: _overlap(d)),
    "duplicate-names": lambda p: _dup(p),
    "deep-nesting": _raw(
        struct.pack("<Q", 200_000) + b"{" + b'"a":' * 1 + b"[" * 99_995 + b"]" * 4
    ),
}


def _overlap(document: dict[str, object]) -> None:
    """Every tensor starts at offset 0."""
    for name, entry in document.items():
        if name != "__metadata__" and isinstance(entry, dict):
            begin, end = entry["data_offsets"]
            entry["data_offsets"] = [0, end - begin]


def _dup(path: Path) -> None:
    document, data = _header(path)
    name = next(k for k in document if k != "__metadata__")
    text = json.dumps(document)
    entry = json.dumps(document[name])
    text = text[:-1] + f', "{name}": {entry}}}'
    raw = text.encode() + b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


SHARD_TOTAL = len(LYING)


@pytest.mark.parametrize("case", sorted(LYING))
def test_lying_header_is_refused(tmp_path: Path, case: str) -> None:
    root = make_tp_checkpoint(tmp_path / "ckpt", 2)
    LYING[case](root / SHARD)
    before = tree_state(tmp_path)
    for extra in ([], ["--json"], ["--verify"]):
        result = run_cli(["inspect-shards", str(root), "--tensor-parallel-size", "2", *extra])
        assert result.code in (1, 2), (result.code, result.out, result.err)
        assert "Traceback" not in result.text
        assert SHARD in result.text, result.text
    assert tree_state(tmp_path) == before


def test_untouched_checkpoint_is_valid(tmp_path: Path) -> None:
    """The control: each case above differs from this valid checkpoint by one shard."""
    root = make_tp_checkpoint(tmp_path / "ckpt", 2)
    result = run_cli(["inspect-shards", str(root), "--tensor-parallel-size", "2"])
    assert result.code == 0, result.text
