"""Versions read leniently: text that is not a PEP 440 version (vLLM's ``unknown``, malformed
METADATA) reads as no version, never as an exception."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def parse_version(text: str | None) -> Version | None:
    """``text`` as a version; None when it is missing, empty or not one."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def same_version(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one version (``1.0`` and ``1.0.0`` do); texts that are not
    versions are the same only when they are equal."""
    if a == b:
        return True
    parsed = parse_version(a)
    return parsed is not None and parsed == parse_version(b)
