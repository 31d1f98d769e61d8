"""Reading a user-facing JSON document (host snapshot, manifest) with kvenv errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvenv.errors import InputError


def read_json(path: Path, *, what: str, missing_hint: str, invalid_hint: str | None = None) -> Any:
    """The parsed JSON at ``path``; a missing, unreadable or malformed file is an InputError
    that names ``what`` it should have been."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}", hint=missing_hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {path}: {exc}", hint=invalid_hint) from None
