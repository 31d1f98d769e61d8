"""Reading one safetensors file's header without touching its tensor data.

The format: 8 bytes little-endian ``u64`` header length ``N``, ``N`` bytes of UTF-8 JSON mapping
tensor names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
byte buffer after the header, ``end`` exclusive) plus an optional ``"__metadata__"`` string map,
then the packed tensor data. The checks follow the reference parser: duplicate names, unknown
dtypes, byte counts that disagree with the shape, offsets out of bounds, overlapping, leaving
holes, or not ending at the end of the file are all refused. No torch, no ``safetensors``.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from typing import Any

import attrs

# The reference parser refuses headers above 100 MB.
MAX_HEADER_BYTES = 100_000_000

# Bits per element of every dtype safetensors knows.
DTYPE_BITS: Mapping[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


class HeaderError(ValueError):
    """The header of one file is malformed; the message says what and where."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


@attrs.frozen
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@attrs.frozen
class Header:
    """The parsed header of one safetensors file."""

    file_size: int
    header_size: int
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str] | None

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def bytes_by_dtype(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for tensor in self.tensors:
            result[tensor.dtype] = result.get(tensor.dtype, 0) + tensor.nbytes
        return dict(sorted(result.items()))


def read_header(path: str | os.PathLike[str]) -> Header:
    """Read and check the header of ``path``; raise :class:`HeaderError` when it is malformed.

    Reads at most ``8 + N`` bytes; the tensor data is never read.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 8:
            raise HeaderError(
                f"file is {size} bytes, shorter than the 8-byte header length field",
                "$",
            )
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > MAX_HEADER_BYTES:
            raise HeaderError(
                f"header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit "
                "(not a safetensors file, or a corrupt length field)"
            )
        if length > size - 8:
            raise HeaderError(
                f"header length {length} runs past the end of the {size}-byte file "
                "(the file is truncated or not a safetensors file)"
            )
        raw = handle.read(length)
    return parse_header(raw, file_size=size)


def parse_header(raw: bytes, *, file_size: int) -> Header:
    """Check the JSON header bytes ``raw`` of a file of ``file_size`` bytes."""
    data_size = file_size - 8 - len(raw)
    if not raw.startswith(b"{"):
        raise HeaderError("header does not start with '{' (not a safetensors file)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header is not UTF-8 (byte {exc.start})") from None
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise HeaderError(f"tensor name {exc.key!r} appears twice", "$") from None
    except json.JSONDecodeError as exc:
        raise HeaderError(f"header is not valid JSON: {exc.msg} at byte {exc.pos}") from None
    except RecursionError:
        raise HeaderError("header JSON is nested too deeply") from None
    if not isinstance(document, dict):
        raise HeaderError(f"header must be a JSON object, found {type(document).__name__}")
    metadata = _metadata(document.pop("__metadata__", None))
    tensors = [_tensor(name, entry, data_size) for name, entry in document.items()]
    _check_layout(tensors, data_size)
    return Header(file_size, len(raw), tuple(tensors), metadata)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HeaderError("__metadata__ must be an object of strings", "$.__metadata__")
    for key, item in value.items():
        if not isinstance(item, str):
            raise HeaderError(
                f"__metadata__ values must be strings, found {type(item).__name__}",
                f"$.__metadata__.{key}",
            )
    return dict(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(name: str, entry: object, data_size: int) -> TensorInfo:
    where = f"$[{json.dumps(name)}]"
    if not isinstance(entry, dict):
        raise HeaderError("tensor entry must be an object", where)
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in entry]
    if missing:
        raise HeaderError(f"tensor entry lacks {', '.join(missing)}", where)
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(
            f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})", f"{where}.dtype"
        )
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise HeaderError("shape must be a list of non-negative integers", f"{where}.shape")
    offsets = entry["data_offsets"]
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) and o >= 0 for o in offsets)
    ):
        raise HeaderError(
            "data_offsets must be two non-negative integers [begin, end]",
            f"{where}.data_offsets",
        )
    begin, end = offsets
    if end < begin:
        raise HeaderError(
            f"data_offsets end {end} is before begin {begin}", f"{where}.data_offsets"
        )
    if end > data_size:
        raise HeaderError(
            f"data_offsets end {end} is past the {data_size}-byte data buffer",
            f"{where}.data_offsets",
        )
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise HeaderError(
            f"{dtype} shape {shape} needs {bits / 8:g} bytes but data_offsets span {end - begin}",
            f"{where}.data_offsets",
        )
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _check_layout(tensors: list[TensorInfo], data_size: int) -> None:
    position = 0
    previous: TensorInfo | None = None
    for tensor in sorted(tensors, key=lambda t: (t.begin, t.end)):
        where = f"$[{json.dumps(tensor.name)}].data_offsets"
        if tensor.begin < position:
            other = previous.name if previous else "?"
            raise HeaderError(f"data overlaps tensor {other!r}", where)
        if tensor.begin > position:
            raise HeaderError(
                f"{tensor.begin - position} unreferenced bytes before this tensor "
                f"(data must be packed from offset 0)",
                where,
            )
        position = tensor.end
        previous = tensor
    if position != data_size:
        raise HeaderError(
            f"tensor data ends at byte {position} of a {data_size}-byte data buffer "
            "(trailing bytes, or a truncated header)"
        )
