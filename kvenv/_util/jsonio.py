"""Reading a JSON document (host snapshot, manifest, kvenv's own state) with kvenv errors."""

from __future__ import annotations

import json

from kvenv._util import nesting
from kvenv.errors import InputError

# ``typing`` and ``pathlib`` only for the type checker: the start-up paths read their state
# through :func:`loads_json` (issue 13's import budgets).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


def loads_json(text: str | bytes, *, file: str) -> Any:
    """The JSON document ``text`` (read from ``file``). Malformed, it raises
    ``json.JSONDecodeError``; nested deeper than :data:`kvenv._util.nesting.MAX_DEPTH`,
    :class:`kvenv._util.nesting.TooDeep` (an :class:`InputError`) naming ``file`` and the
    ``$.path``: both are ``ValueError``, so a reader that treats a malformed file as absent
    treats a too-deep one the same way. Never a ``RecursionError``."""
    try:
        data = json.loads(text)
    except RecursionError:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        raise nesting.too_deep(text, file=file, parse=json.loads, toml=False) from None
    nesting.check_depth(data, file=file)
    return data


def read_json(path: Path, *, what: str, missing_hint: str, invalid_hint: str | None = None) -> Any:
    """The parsed JSON at ``path``; a missing, unreadable, malformed or too deeply nested file
    is an InputError that names ``what`` it should have been."""
    from kvenv._util import memo

    try:
        text = memo.read_bytes(path).decode("utf-8-sig")  # a leading BOM skipped, as in tomlio
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}", hint=missing_hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from None
    try:
        return loads_json(text, file=str(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {path}: {exc}", hint=invalid_hint) from None
