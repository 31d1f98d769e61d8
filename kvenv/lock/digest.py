"""A lock knows when it was edited: the digests kvenv records as it writes a lock, and where a
lock read later differs from what kvenv wrote. Pure.

- ``[tool.kvenv] content-digest``: ``sha256:<hex>`` of the whole document, canonically (JSON
  with sorted keys, TOML dates as ISO 8601), without ``content-digest`` itself and
  ``kvenv-version`` (the writer's version, which a relock with another kvenv may change while
  the content stays). Any change to what the lock says changes it; comments, blank lines and
  key order do not.
- ``[packages.tool.kvenv] digest`` and ``[tool.kvenv] header-digest``: where an edit is. Each
  is a string of 4-hex-digit fragments, one per field of the package's entry (its position
  in the lock included) or of the rest of the document (the number of packages included), in
  the order of their ``$.path``. A fragment is a locator, not a seal (16 bits): the
  content digest says *whether* the lock was edited, the fragments say *where* (the first
  field whose fragment differs), down to ``$.packages[3].wheels[0].hashes.sha256``.

See docs/locks.md ("Hand edits").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

CONTENT_KEY = "content-digest"
HEADER_KEY = "header-digest"
WRITER_KEY = "kvenv-version"
PACKAGE_KEY = "digest"
_FRAGMENT = 4  # hex digits per field


def _canonical(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain
    )


def _plain(value: Any) -> str:
    iso = getattr(value, "isoformat", None)
    if iso is None:
        raise TypeError(f"not a TOML value: {type(value).__name__}")
    return str(iso())


def _tool(table: Mapping[str, Any]) -> Mapping[str, Any]:
    tool = table.get("tool")
    kvenv = tool.get("kvenv") if isinstance(tool, Mapping) else None
    return kvenv if isinstance(kvenv, Mapping) else {}


def _without(document: Mapping[str, Any], *, top: tuple[str, ...], package: bool) -> Any:
    """``document`` without the ``[tool.kvenv]`` keys ``top`` and, with ``package``, without
    each package's ``[packages.tool.kvenv] digest``."""
    out = dict(document)
    tool = _tool(document)
    if tool:
        out["tool"] = {**document["tool"], "kvenv": {k: v for k, v in tool.items() if k not in top}}
    if package and isinstance(document.get("packages"), list):
        out["packages"] = [_package_without(p) for p in document["packages"]]
    return out


def _package_without(package: Any) -> Any:
    if not isinstance(package, Mapping):
        return package
    tool = _tool(package)
    if PACKAGE_KEY not in tool:
        return package
    kvenv = {k: v for k, v in tool.items() if k != PACKAGE_KEY}
    return {**package, "tool": {**package["tool"], "kvenv": kvenv}}


def content_digest(document: Mapping[str, Any]) -> str:
    """The ``content-digest`` of ``document`` (a parsed lock), whatever it records."""
    body = _without(document, top=(CONTENT_KEY, WRITER_KEY), package=False)
    return "sha256:" + hashlib.sha256(_canonical(body).encode()).hexdigest()


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """The fields of ``value`` by ``$.path``: tables are followed, and so are arrays of
    tables under ``wheels``; any other array is one field."""
    if isinstance(value, Mapping):
        for key in sorted(value):
            yield from _leaves(value[key], f"{path}.{key}")
    elif isinstance(value, list) and path.endswith(".wheels"):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def _fragment(path: str, value: Any) -> str:
    return hashlib.sha256(f"{path}\n{_canonical(value)}".encode()).hexdigest()[:_FRAGMENT]


def _fragments(leaves: list[tuple[str, Any]]) -> str:
    return "".join(_fragment(path, value) for path, value in leaves)


def _header_leaves(document: Mapping[str, Any]) -> list[tuple[str, Any]]:
    body = _without(document, top=(CONTENT_KEY, WRITER_KEY, HEADER_KEY), package=False)
    packages = body.pop("packages", None)
    count = len(packages) if isinstance(packages, list) else 0
    return [("$.packages.length", count), *_leaves(body, "$")]


def _package_leaves(package: Any, index: int) -> list[tuple[str, Any]]:
    return list(_leaves(_package_without(package), f"$.packages[{index}]"))


def stamp_lock(document: dict[str, Any], version: str) -> None:
    """Record the digests (and ``version``, the writer's) in ``document``, a lock as parsed
    from its TOML text (so that every value is what a reader will see), in place."""
    for index, package in enumerate(document.get("packages", [])):
        tool = _tool(package)
        if not isinstance(tool, dict) or not tool:  # not kvenv's package (a test's, by hand)
            continue
        tool.pop(PACKAGE_KEY, None)
        tool[PACKAGE_KEY] = _fragments(_package_leaves(package, index))
    table = document["tool"]["kvenv"]
    for key in (CONTENT_KEY, HEADER_KEY, WRITER_KEY):
        table.pop(key, None)
    table[WRITER_KEY] = version
    table[HEADER_KEY] = _fragments(_header_leaves(document))
    table[CONTENT_KEY] = content_digest(document)


def first_edit(document: Mapping[str, Any]) -> tuple[str, str] | None:
    """Where ``document`` differs from what kvenv wrote, as ``($.path, what)``; None when its
    recorded content digest holds (or it records none: see :func:`recorded`)."""
    tool = _tool(document)
    recorded = tool.get(CONTENT_KEY)
    if not isinstance(recorded, str) or recorded == content_digest(document):
        return None
    packages = document.get("packages")
    packages = packages if isinstance(packages, list) else []
    head, kept_head = _header_leaves(document), tool.get(HEADER_KEY)
    if isinstance(kept_head, str):  # its first field is the number of packages: after them
        found = _first_differing(head[1:], kept_head[_FRAGMENT:])
        if found is not None:
            return found
    length_differs = not isinstance(kept_head, str) or kept_head[:_FRAGMENT] != _fragment(*head[0])
    for index, package in enumerate(packages):
        kept = _tool(package).get(PACKAGE_KEY) if isinstance(package, Mapping) else None
        where = f"$.packages[{index}]"
        if not isinstance(kept, str):
            return where, "a package kvenv did not write was added here"
        leaves = _package_leaves(package, index)
        if _fragments(leaves) == kept:
            continue
        for shift, what in ((1, "removed"), (-1, "added")):
            if _fragments(_package_leaves(package, index + shift)) == kept:
                return where, f"a package was {what} here"
        found = _first_differing(leaves, kept)
        if found is not None:
            return found
        return where, "this package differs from what kvenv wrote"
    if length_differs:  # every package as written: one was removed from the end
        return f"$.packages[{len(packages)}]", "a package was removed here"
    return "$", "the lock differs from what kvenv wrote"


def _first_differing(leaves: list[tuple[str, Any]], kept: Any) -> tuple[str, str] | None:
    """The first field whose fragment differs from ``kept``; the fields as written cannot be
    told apart from the present ones when their number changed (a key added or removed): then
    the first field past the common ones that differs, or the table itself."""
    if not isinstance(kept, str):
        return None
    for number, (path, value) in enumerate(leaves):
        fragment = kept[number * _FRAGMENT : (number + 1) * _FRAGMENT]
        if fragment != _fragment(path, value):
            if len(kept) != len(leaves) * _FRAGMENT and fragment:
                return path, "a key was added or removed here"
            return path, "this value differs from what kvenv wrote"
    if len(kept) != len(leaves) * _FRAGMENT:
        return leaves[-1][0] if leaves else "$", "a key was removed after this one"
    return None


def recorded(document: Mapping[str, Any]) -> bool:
    """Whether ``document`` records a content digest (a lock written before kvenv 0.2 does
    not)."""
    return isinstance(_tool(document).get(CONTENT_KEY), str)
