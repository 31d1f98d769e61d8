"""The files of a PEP 691 JSON page that may matter, found without parsing the whole page.

A project page lists every file of every release (pydantic-core's is 7 MB); a lock needs the
few wheels that install on its target. :func:`scan_files` finds every ``"filename"`` with a
regular expression, asks ``keep`` about each name, and decodes only the file objects it keeps
(``json``'s own decoder, one object at a time). It vouches for its answer or gives none: when
the page is not shaped as expected (a name with escapes, a ``"filename"`` it cannot place, an
object that does not decode to the file it should be) it returns None and the caller parses
the whole page. Pure; issue 13 measured json.loads of the vLLM closure's 67 MB of pages at
0.4 s of CPU against 0.04 s for the scan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_FILENAME = re.compile(r'"filename"\s*:\s*"([^"\\]*)"')
_DECODER = json.JSONDecoder()
_BACKTRACK = 8  # nested objects a file may open before its "filename" key


def scan_files(
    text: str, keep: Callable[[str], bool]
) -> tuple[list[str], list[dict[str, Any]]] | None:
    """Every file name on the page, in order, and the decoded file objects whose name ``keep``
    accepts; None when the scan cannot vouch for the page (parse it whole instead)."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    names: list[str] = _FILENAME.findall(text)
    if len(names) != text.count('"filename"'):
        return None  # a "filename" the expression could not read (escapes, odd spacing)
    kept: list[dict[str, Any]] = []
    end = 0  # where the previous kept object ended: objects do not overlap
    for filename in names:
        if not keep(filename):
            continue
        at = text.find(f'"{filename}"', end)
        found = None if at < 0 else _object_around(text, at, at + len(filename) + 2, filename, end)
        if found is None:
            return None
        obj, end = found
        kept.append(obj)
    return names, kept


def _object_around(
    text: str, start: int, stop: int, filename: str, floor: int
) -> tuple[dict[str, Any], int] | None:
    """The object holding the file name found at ``start``: the nearest ``{`` before it that
    decodes to an object spanning it, with that file name."""
    pos = start
    for _ in range(_BACKTRACK):
        pos = text.rfind("{", floor, pos)
        if pos < 0:
            return None
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):  # a hostile page nesting too deep: no answer
            continue
        if end >= stop and isinstance(obj, dict) and obj.get("filename") == filename:
            return obj, end
    return None
