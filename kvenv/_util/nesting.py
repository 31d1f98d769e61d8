"""The one bound on how deeply a TOML or JSON document kvenv reads may nest.

Every reader of a profile, lock, host snapshot, manifest, pointer or marker parses through
:mod:`kvenv._util.tomlio` or :mod:`kvenv._util.jsonio`, which call :func:`check_depth` on what they
parsed and :func:`too_deep` when the parser itself ran out of stack (a ``RecursionError``: a
``x = {a = {a = …}}`` 1,000 deep, or 100,000 nested JSON arrays). Either way the document is
refused with :class:`TooDeep`: one problem naming the file and the ``$.path`` of the first
value nested deeper than :data:`MAX_DEPTH`, never a traceback.

:class:`TooDeep` is also a ``ValueError``, like ``json.JSONDecodeError``: a reader of kvenv's
own state that treats a malformed file as absent (``except ValueError``) treats a too-deep one
the same way.
"""

from __future__ import annotations

from kvenv.errors import InputError, Problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: Containers (tables, arrays, objects) a document may nest; the document itself is depth 1.
#: kvenv's own documents nest at most 6 deep (a lock's ``[tool.kvenv]``); 64 leaves room for
#: any ``[tool.*]`` table while staying far below Python's recursion limit.
MAX_DEPTH = 64

FIX = f"nest tables and arrays at most {MAX_DEPTH} deep, or check this is the right file"


class TooDeep(InputError, ValueError):
    """A document nests deeper than :data:`MAX_DEPTH`."""


def _step(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if text and text.replace("_", "a").replace("-", "a").isalnum() and text.isascii():
        return f"{path}.{text}"
    return f"{path}[{text!r}]"


def _error(file: str, path: str) -> TooDeep:
    return TooDeep(
        f"nested too deeply: {file}",
        problems=[
            Problem(
                f"nested deeper than {MAX_DEPTH} tables or arrays",
                file=file,
                path=path,
                fix=FIX,
            )
        ],
    )


def deepest(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """The ``$.path`` of the first container in ``data`` nested deeper than ``limit``, or None.
    Iterative: it walks any depth without recursion. Paths are spelled only for a document
    that is too deep (every document kvenv reads is walked: a lock's 400 tables cost 0.3 ms)."""
    if _within(data, limit):
        return None
    stack: list[tuple[Any, int, str]] = [(data, 1, "$")]
    while stack:
        value, depth, path = stack.pop()
        if depth > limit:
            return path
        items = value.items() if isinstance(value, dict) else enumerate(value)
        children = [(k, v) for k, v in items if isinstance(v, (dict, list))]
        stack.extend((v, depth + 1, _step(path, k)) for k, v in reversed(children))
    return None


def _within(data: Any, limit: int) -> bool:
    """Whether no container in ``data`` lies deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if depth > limit:
            return False
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, (dict, list)):
                push((child, depth + 1))
    return True


def check_depth(data: Any, *, file: str) -> None:
    """Raise :class:`TooDeep` when parsed ``data`` nests deeper than :data:`MAX_DEPTH`."""
    if isinstance(data, (dict, list)):
        path = deepest(data)
        if path is not None:
            raise _error(file, path)


def too_deep(text: str, *, file: str, parse: Callable[[str], Any], toml: bool) -> TooDeep:
    """The error for ``text``, on which ``parse`` ran out of stack, naming where it nests too
    deep: the text is cut at the first bracket past :data:`MAX_DEPTH`, closed, and parsed
    again (``toml``: the text is TOML, else JSON)."""
    found = _cut(text, toml=toml)
    path = "$"
    if found is not None:
        offset, closers = found
        try:
            data = parse(text[:offset] + "{}" + "".join(reversed(closers)))
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, (dict, list)):
            path = deepest(data) or "$"
    return _error(file, path)


def _cut(text: str, *, toml: bool) -> tuple[int, list[str]] | None:
    """The offset of the first ``[``/``{`` outside strings and comments that opens a container
    deeper than :data:`MAX_DEPTH` (a TOML table header adds at most 2 and never nests), with the
    closing brackets still owed at that point; None when the text nests no deeper."""
    closers: list[str] = []
    limit = MAX_DEPTH - 1 if toml else MAX_DEPTH  # a TOML document's top table has no brace
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char in "[{":
            if len(closers) >= limit:
                return index, closers
            closers.append("]" if char == "[" else "}")
        elif char in "]}":
            if closers:
                closers.pop()
        elif char == '"' or (toml and char == "'"):
            index = _skip_string(text, index, toml=toml)
            continue
        elif toml and char == "#":
            end = text.find("\n", index)
            index = size if end < 0 else end
            continue
        index += 1
    return None


def _skip_string(text: str, index: int, *, toml: bool) -> int:
    """The offset just past the string that starts at ``index``."""
    quote = text[index]
    if toml and text.startswith(quote * 3, index):
        end = text.find(quote * 3, index + 3)
        while quote == '"' and end > 0 and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        return len(text) if end < 0 else end + 3
    end = index + 1
    while end < len(text) and text[end] != quote and text[end] != "\n":
        end += 2 if quote == '"' and text[end] == "\\" else 1
    return end + 1


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1
