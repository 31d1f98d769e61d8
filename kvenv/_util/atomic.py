"""The one atomic file writer: every file of kvenv's state (manifests, the generation pointer,
locks, snapshots, shims, cache entries, shard manifests) is written through here.

A write goes to a uniquely named temporary file in the destination's directory, is flushed and
fsynced (``durable=True``, the default), then ``os.replace``d over the destination, and the
directory is fsynced so the rename itself survives a crash. A reader sees the old bytes or the
new bytes, never a torn file; a failure at any point removes the temporary file and leaves the
old destination untouched. ``exclusive=True`` refuses to replace an existing file (the
destination is created with a hard link, which fails if it exists).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypedDict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["fsync_dir", "write_bytes", "write_json", "write_json_streamed", "write_text"]


class WriteOptions(TypedDict, total=False):
    """:func:`write_bytes`'s options, which :func:`write_text` and :func:`write_json` pass on."""

    mode: int
    durable: bool
    exclusive: bool
    make_parents: bool


def write_bytes(
    path: Path,
    data: bytes,
    *,
    mode: int = 0o644,
    durable: bool = True,
    exclusive: bool = False,
    make_parents: bool = False,
) -> None:
    """Replace (or, ``exclusive``, create) ``path`` with ``data`` atomically."""
    _write(path, lambda stream: stream.write(data), mode, durable, exclusive, make_parents)


def write_json_streamed(path: Path, data: Any, *, durable: bool = True) -> None:
    """Replace ``path`` atomically with ``data`` as compact JSON, encoded piece by piece into
    the file (a large record never exists whole in memory as text: the peak memory of the
    apply that writes it stays what its work needs). NaN and infinity are refused."""

    def dump(stream: Any) -> None:
        import io

        text = io.TextIOWrapper(stream, encoding="utf-8")
        json.dump(data, text, allow_nan=False)
        text.flush()
        text.detach()  # the stream stays open: _write flushes, syncs and closes it

    _write(path, dump, 0o644, durable, False, False)


def _write(
    path: Path,
    fill: Any,
    mode: int,
    durable: bool,
    exclusive: bool,
    make_parents: bool,
) -> None:
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here: activation imports this module, and tempfile is not light

    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as stream:
            fill(stream)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.chmod(temp, mode)
        if exclusive:
            os.link(temp, path)  # FileExistsError when path exists: nothing is replaced
            temp.unlink()
        else:
            os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def write_text(path: Path, text: str, **options: Unpack[WriteOptions]) -> None:
    """:func:`write_bytes` of ``text`` encoded as UTF-8 (newlines written as given)."""
    write_bytes(path, text.encode("utf-8"), **options)


def write_json(path: Path, data: Any, **options: Unpack[WriteOptions]) -> None:
    """:func:`write_bytes` of ``data`` as indented JSON with a final newline; NaN and infinity
    are refused (``ValueError``, before anything is written): kvenv never writes non-standard
    JSON."""
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    write_bytes(path, text.encode("utf-8"), **options)


def fsync_dir(directory: Path) -> None:
    """Make a rename or creation inside ``directory`` durable (a no-op where directories
    cannot be opened, as on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
