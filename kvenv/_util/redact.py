"""Keeping secrets out of snapshots: no environment variable is ever recorded, and as a last
guard any value of a secret-looking variable found in the snapshot's text is masked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
MIN_LENGTH = 6
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|_KEY$|^KEY$",
    re.IGNORECASE,
)


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Values of variables whose names look secret, longest first (so a longer secret is
    masked before a shorter one that is part of it)."""
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_LENGTH}
    return sorted(values, key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON-like) with every occurrence of a secret replaced by ``***``."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value
