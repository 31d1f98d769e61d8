"""Output helpers for the CLI (the only printing code)."""

from __future__ import annotations

import sys
from typing import Any


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def emit_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
