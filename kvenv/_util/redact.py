"""The one redactor: what kvenv may show of a URL or of a secret, in every message, log and file.

- :func:`redact_url`: a URL without user-info, fragment or query string (a query is shown as
  ``?…``: signed download URLs carry their credentials there).
- :func:`mask` / :func:`mask_bytes`: text with every known secret value replaced by ``***``.
- :func:`secret_values`: the values of secret-looking environment variables (tokens, keys,
  passwords), the secrets snapshots are scrubbed of.
- :func:`scrub`: a JSON-like value with every secret masked in its strings.

Standard library only: the server's log supervisor (:mod:`kvenv.runtime.logpipe`) runs as a
script outside kvenv and loads this file by its path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MASK", "mask", "mask_bytes", "redact_url", "scrub", "secret_values"]

MASK = "***"
MIN_LENGTH = 6
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|_KEY$|^KEY$",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """The URL without credentials, query or fragment (safe for messages and logs); a query
    string is shown as ``?…``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    query = "…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a secret replaced by ``***`` (longest secret first,
    so a secret that contains a shorter one is masked whole; empty secrets are ignored)."""
    for secret in sorted({s for s in secrets if s}, key=lambda s: (-len(s), s)):
        text = text.replace(secret, MASK)
    return text


def mask_bytes(data: bytes, secrets: Iterable[bytes]) -> bytes:
    """:func:`mask` for bytes (a log read or written as raw bytes)."""
    marker = MASK.encode()
    for secret in sorted({s for s in secrets if s}, key=lambda s: (-len(s), s)):
        data = data.replace(secret, marker)
    return data


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Values of variables whose names look secret and that are long enough to mask safely,
    longest first."""
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_LENGTH}
    return sorted(values, key=len, reverse=True)


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (JSON-like) with every occurrence of a secret in its strings masked."""
    found = list(secrets)
    if isinstance(value, str):
        return mask(value, found)
    if isinstance(value, dict):
        return {k: scrub(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, found) for v in value]
    return value
