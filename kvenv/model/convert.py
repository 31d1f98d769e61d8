"""kvenv's cattrs converters (strict and lenient, one set of hooks) and their errors as Problems.

Structuring is strict: unknown keys are refused (in the lenient converter, used for files kvenv
writes, they are ignored: docs/compatibility.md), ``"2"`` is not an int, ``1`` is not a bool,
and every problem of a document is reported at once with its ``$.path``.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn
from cattrs.v import transform_error

from kvenv.errors import InputError, Problem
from kvenv.model import fields

T = TypeVar("T")

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _strict(kind: type) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not ok:
            raise TypeError(f"expected {_TYPE_NAMES[kind]}, got {_describe(value)}")
        if kind is float and not math.isfinite(value):
            raise ValueError(f"{value!r} is not valid: write a finite number (not nan or inf)")
        return value

    return hook


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"{type(value).__name__} {value!r}"


def _constrained(kind: object) -> Callable[[Any, Any], str]:
    as_str = _strict(str)

    def hook(value: Any, _: Any) -> str:
        text: str = as_str(value, str)
        reason = fields.check(kind, text)
        if reason:
            raise ValueError(reason)
        return text

    return hook


def _bounded(kind: object) -> Callable[[Any, Any], Any]:
    base, low, high, exclusive, fix = fields.BOUNDS[kind]
    as_base = _strict(base)

    def hook(value: Any, _: Any) -> Any:
        number = as_base(value, base)
        too_low = number <= low if exclusive else number < low
        if too_low or (high is not None and number > high):
            raise ValueError(f"{number!r} is out of range: {fix}")
        return number

    return hook


def _attrs_factory(cls: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    generated = make_dict_structure_fn(cls, conv)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a table, got {_describe(value)}")
        return generated(value, cls)

    return hook


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) is Literal


def _is_allowed(value: Any, allowed: tuple[Any, ...]) -> bool:
    """``value`` is one of ``allowed`` with the same type (``True`` is not ``1``)."""
    return any(type(value) is type(a) and value == a for a in allowed)


def _literal_hook(tp: Any, _: Any) -> Any:
    allowed = get_args(tp)

    def hook(value: Any, _t: Any) -> Any:
        if not _is_allowed(value, allowed):
            choices = ", ".join(repr(a) for a in allowed)
            raise ValueError(f"expected one of {choices}, got {_describe(value)}")
        return value

    return hook


def kind_of(cls: Any) -> str | None:
    if not attrs.has(cls):
        return None
    if "kind" not in attrs.fields_dict(cls):
        return None
    kind = typing.get_type_hints(cls)["kind"]
    if get_origin(kind) is not Literal or len(get_args(kind)) != 1:
        return None
    (value,) = get_args(kind)
    return str(value)


def _is_tagged_union(tp: Any) -> bool:
    if get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return all(kind_of(member) for member in get_args(tp))


def _tagged_union_factory(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    members = {kind_of(m): m for m in get_args(tp)}
    kinds = ", ".join(repr(k) for k in members)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a table, got {_describe(value)}")
        kind = value.get("kind", next(iter(members)))
        if not isinstance(kind, str) or kind not in members:
            raise ValueError(f"kind must be one of {kinds}, got {_describe(kind)}")
        return conv.structure(value, members[kind])

    return hook


def _is_optional(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin not in (typing.Union, types.UnionType):
        return False
    args = get_args(tp)
    return len(args) == 2 and type(None) in args


def _optional_factory(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = next(a for a in get_args(tp) if a is not type(None))

    def hook(value: Any, _: Any) -> Any:
        if value is None:
            return None
        return conv.structure(value, inner)

    return hook


def _list_factory(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    args = get_args(tp)
    inner = args[0] if args else Any

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected an array, got {_describe(value)}")
        out: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                out.append(conv.structure(item, inner))
            except Exception as exc:
                note = IterableValidationNote(f"Structuring {tp} @ index {index}", index, inner)
                setattr(exc, "__notes__", [*getattr(exc, "__notes__", []), note])
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {tp!r}", errors, tp)
        return out

    return hook


def _dict_factory(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    args = get_args(tp)
    inner = args[1] if len(args) == 2 else Any

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a table, got {_describe(value)}")
        out: dict[str, Any] = {}
        errors: list[Exception] = []
        for key, item in value.items():
            try:
                name = conv.structure(key, args[0] if args else str)
                out[name] = conv.structure(item, inner)
            except Exception as exc:
                note = AttributeValidationNote(f"Structuring {tp} @ key {key}", str(key), inner)
                setattr(exc, "__notes__", [*getattr(exc, "__notes__", []), note])
                errors.append(exc)
        if errors:
            raise ClassValidationError(f"While structuring {tp!r}", errors, dict)
        return out

    return hook


def _origin_is(kind: type) -> Callable[[Any], bool]:
    def predicate(tp: Any) -> bool:
        origin: Any = get_origin(tp)
        return bool(origin == kind)

    return predicate


def _build(*, forbid_extra_keys: bool) -> cattrs.Converter:
    """A converter with kvenv's strict hooks; ``forbid_extra_keys`` refuses unknown keys."""
    conv = cattrs.Converter(forbid_extra_keys=forbid_extra_keys, detailed_validation=True)
    for builtin in (str, int, float, bool):
        conv.register_structure_hook(builtin, _strict(builtin))
    for pattern_type in fields.PATTERNS:
        conv.register_structure_hook(pattern_type, _constrained(pattern_type))
    for bounded_type in fields.BOUNDS:
        conv.register_structure_hook(bounded_type, _bounded(bounded_type))
    conv.register_structure_hook_factory(attrs.has, _attrs_factory)
    conv.register_structure_hook_factory(_is_literal, lambda tp: _literal_hook(tp, None))
    conv.register_structure_hook_factory(_is_tagged_union, _tagged_union_factory)
    conv.register_structure_hook_factory(_is_optional, _optional_factory)
    conv.register_structure_hook_factory(_origin_is(list), _list_factory)
    conv.register_structure_hook_factory(_origin_is(dict), _dict_factory)
    return conv


# Profiles (written by hand): an unknown key is refused, so a typo is caught.
converter = _build(forbid_extra_keys=True)
# Files kvenv writes (locks, host snapshots, manifests, pointers, bundle indexes): keys this
# kvenv does not know are ignored within a format version (docs/compatibility.md).
lenient_converter = _build(forbid_extra_keys=False)


def _format(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        keys = ", ".join(sorted(exc.extra_fields))
        return f"unknown key(s): {keys}"
    if isinstance(exc, KeyError):
        return "required key is missing"
    if isinstance(exc, (TypeError, ValueError)) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


def problems_from(exc: Exception, *, file: str | None) -> list[Problem]:
    """Turn a cattrs structuring error into one :class:`Problem` per bad field."""
    if not isinstance(exc, (ClassValidationError, IterableValidationError)):
        return [Problem(_format(exc, None), file=file, path="$")]
    out: list[Problem] = []
    for line in transform_error(exc, path="$", format_exception=_format):
        message, _, path = line.rpartition(" @ ")
        if not message:
            message, path = path, "$"
        # (cattrs reports unknown keys at the path of the table that holds them)
        out.append(Problem(message, file=file, path=path, fix=_fix_for(message)))
    return out


def _fix_for(message: str) -> str | None:
    if message.startswith("unknown key(s)"):
        return "remove the key or check its spelling"
    if message == "required key is missing":
        return "add the key"
    return None


def structure(data: Any, cls: type[T], *, file: str | None, what: str, lenient: bool = False) -> T:
    """Structure ``data`` into ``cls`` or raise :class:`InputError` listing every problem.
    ``lenient``: keys ``cls`` does not know are ignored (a file kvenv wrote, read by a kvenv
    older than the writer within one format version); otherwise they are refused."""
    try:
        return (lenient_converter if lenient else converter).structure(data, cls)
    except (ClassValidationError, IterableValidationError, TypeError, ValueError, KeyError) as exc:
        problems = problems_from(exc, file=file)
        raise InputError(f"invalid {what}: {file or '<input>'}", problems=problems) from None


def unstructure(obj: Any) -> Any:
    return _drop_none(converter.unstructure(obj))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value
