"""Building safetensors files for tests and benchmarks: a valid header for given tensors, and a
file whose tensor data is a sparse hole (a multi-gigabyte checkpoint that costs no disk)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvenv.runtime.safetensors_header import DTYPE_BITS


def header_bytes(
    tensors: Mapping[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None
) -> bytes:
    """Serialise a valid header for ``tensors`` (name -> (dtype, shape)), packed in order and
    padded to a multiple of 8 with spaces."""
    document: dict[str, Any] = {}
    if metadata is not None:
        document["__metadata__"] = metadata
    position = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_BITS[dtype] // 8
        document[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [position, position + size],
        }
        position += size
    text = json.dumps(document, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_sparse(path: Path, tensors: Mapping[str, tuple[str, list[int]]]) -> int:
    """Write a valid safetensors file whose data is a sparse hole; return its size."""
    head = header_bytes(tensors)
    data = sum(math.prod(shape) * DTYPE_BITS[dtype] // 8 for dtype, shape in tensors.values())
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(len(head) + data)
    return len(head) + data
