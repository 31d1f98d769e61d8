"""Reading and writing TOML documents with kvenv errors (never a traceback)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kvenv._util import nesting
from kvenv.errors import InputError, Problem

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


#: A UTF-8 byte order mark, as some editors start a file: one at the very start is accepted
#: and skipped (TOML 1.0 only asks for a UTF-8 document; its test suite accepts a leading BOM,
#: and ``tomllib`` alone would fail with "Invalid statement (at line 1, column 1)").
BOM = "\ufeff"


def loads(text: str, *, file: str) -> dict[str, Any]:
    """The TOML document ``text`` (read from ``file``; a leading :data:`BOM` is skipped);
    malformed or nested deeper than :data:`kvenv._util.nesting.MAX_DEPTH`, an
    :class:`InputError` naming ``file``."""
    if text.startswith(BOM):
        text = text[1:]
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(
            f"invalid TOML: {file}",
            problems=[Problem(str(exc), file=file, path="$", fix="correct the TOML syntax")],
        ) from None
    except RecursionError:
        raise nesting.too_deep(text, file=file, parse=tomllib.loads, toml=True) from None
    nesting.check_depth(data, file=file)
    return data


def read(path: Path, *, max_bytes: int | None = None, what: str = "file") -> dict[str, Any]:
    """The TOML document at ``path``; with ``max_bytes``, a larger file is refused unread."""
    return read_hashed(path, max_bytes=max_bytes, what=what)[0]


def read_hashed(
    path: Path, *, max_bytes: int | None = None, what: str = "file"
) -> tuple[dict[str, Any], str]:
    """:func:`read`, and the sha256 (hex) of the very bytes parsed: what a record of the
    result (``kvenv.model.facts``) is keyed by, with no window for an edit in between."""
    try:
        with path.open("rb") as stream:
            raw = stream.read() if max_bytes is None else stream.read(max_bytes + 1)
    except FileNotFoundError:
        from kvenv._util import memo

        memo.note("bytes", str(path), None)
        raise InputError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"expected a file, found a directory: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise InputError(
            f"{what} too large: {path} is over {max_bytes} bytes",
            hint=f"a {what} is at most {max_bytes} bytes: is this the right file?",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"not UTF-8 text: {path}", hint="TOML files are UTF-8") from None
    from kvenv._util import memo
    from kvenv._util.identity import sha256_hex

    digest = sha256_hex(raw)
    if max_bytes is None or len(raw) <= max_bytes:  # a capped read saw the whole file
        memo.note("bytes", str(path), digest)
    return loads(text, file=str(path)), digest


def dumps(data: dict[str, Any]) -> str:
    import tomli_w  # here: reading a profile (every command) never writes TOML

    return tomli_w.dumps(data)
