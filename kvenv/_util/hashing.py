"""Streaming sha256 and size of files, in constant memory, at the speed of OpenSSL.

One preallocated buffer is filled with ``readinto`` from an unbuffered file and handed to
``hashlib`` through a ``memoryview`` slice: no per-chunk allocation, no copy, and the GIL is
released while OpenSSL hashes, so several files hash in parallel threads.
:class:`HashingWriter` does the same for bytes being written (downloads are hashed while they
are streamed to disk, so a file is never read twice).

``benchmarks/hashing.py`` measures :func:`sha256_file` against a bare ``hashlib`` loop and
``sha256sum``.
"""

from __future__ import annotations

import hashlib
import os
from types import TracebackType
from typing import BinaryIO, Protocol

from kvenv.errors import IntegrityError


class Readable(Protocol):
    """A binary source that fills a buffer (files, HTTP responses)."""

    def readinto(self, buffer: bytearray, /) -> int | None: ...


# 1 MiB: large enough that the per-call overhead vanishes, small enough to stay in L2/L3.
CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str], *, chunk: int = CHUNK) -> tuple[str, int]:
    """Return ``(sha256 hex digest, size in bytes)`` of the file at ``path``."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    size = 0
    with open(path, "rb", buffering=0) as stream:
        readinto = stream.readinto
        update = digest.update
        while True:
            count = readinto(buffer)
            if not count:
                break
            update(view[:count])
            size += count
    return digest.hexdigest(), size


def verify_file(
    path: str | os.PathLike[str], sha256: str, size: int | None = None, *, label: str | None = None
) -> None:
    """Raise :class:`IntegrityError` unless the file has exactly this sha256 (and size).

    The size is compared first from ``stat`` (cheap), so a truncated file fails without being
    read. ``label`` names the artifact in the message instead of the path.
    """
    where = label or str(path)
    expected = sha256.strip().lower()
    if size is not None:
        actual_size = os.stat(path).st_size
        if actual_size != size:
            raise size_mismatch(where, size, actual_size)
    actual, _ = sha256_file(path)
    if actual != expected:
        raise sha_mismatch(where, expected, actual)


def sha_mismatch(where: str, expected: str, actual: str) -> IntegrityError:
    return IntegrityError(
        f"sha256 mismatch for {where}: expected {expected}, got {actual}",
        hint="the file is corrupt or not the pinned artifact; nothing was installed",
    )


def size_mismatch(where: str, expected: int, actual: int) -> IntegrityError:
    return IntegrityError(
        f"size mismatch for {where}: expected {expected} bytes, got {actual}",
        hint="the file is truncated, corrupt or not the pinned artifact; nothing was installed",
    )


class HashingWriter:
    """A binary file-like that hashes and counts every byte written to ``stream``.

    ``limit`` (the expected size) stops a download that sends more bytes than pinned, before
    they reach the disk. :meth:`check` compares the result with the pin.
    """

    def __init__(self, stream: BinaryIO, *, limit: int | None = None, label: str = "") -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self._limit = limit
        self._label = label
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        count = len(data)
        if self._limit is not None and self.size + count > self._limit:
            raise IntegrityError(
                f"size mismatch for {self._label or 'download'}: more than the pinned "
                f"{self._limit} bytes received",
                hint="the source serves a different file than the one pinned; nothing was "
                "installed",
            )
        self._digest.update(data)
        self._stream.write(data)
        self.size += count
        return count

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self._stream.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()

    def check(self, sha256: str, size: int | None = None) -> None:
        """Raise :class:`IntegrityError` unless what was written matches the pin."""
        where = self._label or "download"
        if size is not None and self.size != size:
            raise size_mismatch(where, size, self.size)
        actual = self.hexdigest()
        if actual != sha256.strip().lower():
            raise sha_mismatch(where, sha256.strip().lower(), actual)

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.flush()


def copy_hashing(source: Readable, sink: HashingWriter, *, chunk: int = CHUNK) -> None:
    """Stream ``source`` (a binary file or HTTP response) into ``sink`` through one buffer."""
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    while True:
        count = source.readinto(buffer)
        if not count:
            break
        sink.write(view[:count])
