"""Constrained value types shared by every model (profile, host snapshot, manifest).

Each is a ``NewType`` over a builtin, registered in :mod:`kvenv.model.convert` with a checking hook,
so a bad value is reported with its ``$.path`` and a fix. ``PATTERNS`` also feeds the JSON
Schema generator, so the schema and the checks cannot drift apart.
"""

from __future__ import annotations

import re
from typing import NewType

Sha256 = NewType("Sha256", str)
Revision = NewType("Revision", str)
PackageName = NewType("PackageName", str)
ProfileName = NewType("ProfileName", str)
PythonVersion = NewType("PythonVersion", str)
DottedVersion = NewType("DottedVersion", str)
Pep440Version = NewType("Pep440Version", str)
HttpsUrl = NewType("HttpsUrl", str)
RelPath = NewType("RelPath", str)
RootPath = NewType("RootPath", str)
WheelFilename = NewType("WheelFilename", str)
HfRepo = NewType("HfRepo", str)
EnvName = NewType("EnvName", str)
NonEmpty = NewType("NonEmpty", str)
Requirement508 = NewType("Requirement508", str)
PositiveInt = NewType("PositiveInt", int)
Fraction = NewType("Fraction", float)

# Caps on what a profile may hold (docs/profiles.md says why): a profile file is a few KiB; a
# text value (a description, a path, an environment value) fits in PATH_MAX.
MAX_PROFILE_BYTES = 1 << 20
MAX_TEXT_CHARS = 4096

# numeric type -> (base type, minimum, maximum, exclusive minimum?, what to write instead)
BOUNDS: dict[object, tuple[type, float, float | None, bool, str]] = {
    PositiveInt: (int, 1, None, False, "a whole number of at least 1"),
    Fraction: (float, 0.0, 1.0, True, "a number greater than 0 and at most 1"),
}

# type -> (regex the value must fully match, what the user should write instead)
PATTERNS: dict[object, tuple[str, str]] = {
    Sha256: (r"[0-9a-f]{64}", "a sha256 is 64 lowercase hex characters"),
    Revision: (
        r"[0-9a-f]{40}",
        "pin an immutable 40-hex commit (lowercase), never a branch or tag",
    ),
    PackageName: (
        r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?",
        "a distribution name as in PEP 508 (letters, digits, '.', '_', '-')",
    ),
    ProfileName: (
        r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?",
        "a profile name is lowercase letters, digits, '.', '_' and '-'",
    ),
    PythonVersion: (r"3\.[0-9]+(\.[0-9]+)?", "write the Python version as 3.12 or 3.12.13"),
    DottedVersion: (r"[0-9]+(\.[0-9]+)*", "write dotted numbers, such as 12.8 or 580.159.04"),
    Pep440Version: (r"\S+", "a version valid under PEP 440, such as 0.18.2 or 2.10.0+cu128"),
    HttpsUrl: (r"https://\S+", "remote URLs must use https://"),
    RelPath: (
        r"[^/\\~\x00][^\x00]*",
        "a relative path inside the project, without '..' segments",
    ),
    RootPath: (
        r"(/|~/)[^\x00]*",
        "an absolute path (or one starting with ~/), without '..' segments",
    ),
    WheelFilename: (r"[^/\\\x00]+\.whl", "a wheel file name ending in .whl, without directories"),
    HfRepo: (
        r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*",
        "a Hugging Face repository id such as owner/name",
    ),
    EnvName: (r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name such as VLLM_LOGGING_LEVEL"),
    NonEmpty: (r"\S[\s\S]*", "a non-empty text"),
    Requirement508: (
        r"\s*[A-Za-z0-9][^\x00]*",
        'a PEP 508 requirement such as "rich>=13", "datasets[audio]" or '
        "\"uvloop; sys_platform == 'linux'\"",
    ),
}

# RelPath and RootPath values must not contain a ``..`` segment (in any position).
TRAVERSAL = r"(^|[/\\])\.\.([/\\]|$)"
NO_TRAVERSAL: frozenset[object] = frozenset({RelPath, RootPath})

_COMPILED: dict[object, re.Pattern[str]] = {}  # compiled on first use (CLI startup time)

# Kinds whose every character is ASCII: a non-ASCII character in one (a Greek omicron in
# "t\u03bfrch", a Cyrillic "а" in a profile name) is named by its code point, since it looks
# like the ASCII letter it replaces.
ASCII_ONLY: frozenset[object] = frozenset(
    {Sha256, Revision, PackageName, ProfileName, PythonVersion, DottedVersion, HfRepo, EnvName}
)


def foreign_character(value: str) -> str | None:
    """``value``'s first non-ASCII character named as ``U+03BF GREEK SMALL LETTER OMICRON``
    with its position (1-based), or None when ``value`` is ASCII."""
    if value.isascii():
        return None
    import unicodedata

    for index, char in enumerate(value, 1):
        if not char.isascii():
            name = unicodedata.name(char, "an unnamed character")
            return f"character {index} is U+{ord(char):04X} {name}, not ASCII"
    return None


def check(kind: object, value: str) -> str | None:
    """Return None when ``value`` is valid for ``kind``, else the reason and fix."""
    pattern, fix = PATTERNS[kind]
    compiled = _COMPILED.get(kind)
    if compiled is None:
        compiled = _COMPILED[kind] = re.compile(pattern)
    if not compiled.fullmatch(value):
        foreign = foreign_character(value) if kind in ASCII_ONLY else None
        if foreign is not None:
            return f"{value!r} is not valid: {foreign} (a look-alike?); {fix}"
        return f"{value!r} is not valid: {fix}"
    if kind in NO_TRAVERSAL and re.search(TRAVERSAL, value):
        return f"{value!r} is not valid: path traversal ('..') is not allowed; {fix}"
    if kind is Pep440Version:
        from packaging.version import InvalidVersion, Version

        try:
            Version(value)
        except InvalidVersion:
            return f"{value!r} is not valid: {fix}"
    if kind is Requirement508:
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            Requirement(value)
        except InvalidRequirement as exc:
            return f"{value!r} is not valid: {exc}; {fix}"
    return None
