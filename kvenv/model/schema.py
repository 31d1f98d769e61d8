"""JSON Schemas (draft 2020-12) generated from kvenv's attrs models.

The generator walks a model the way :mod:`kvenv.model.convert` structures it: the constrained
``NewType`` patterns of :data:`kvenv.model.fields.PATTERNS`, the bounds of
:data:`kvenv.model.fields.BOUNDS`,
``Literal`` as ``enum``/``const``, ``X | None``, lists, tables, the ``kind``-tagged unions as
``oneOf``, unknown keys refused (``additionalProperties: false``), and every field without a
default required. So the committed schemas cannot drift from what the loader accepts; a test
compares each committed file with a fresh generation.

Which models are published under which name is :mod:`kvenv.cli.schemas`'s (the registry names
models of every layer). Regenerate a committed schema with
``kvenv schema NAME > schemas/NAME.schema.json``.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

import attrs

from kvenv.model import convert, fields

DIALECT = "https://json-schema.org/draft/2020-12/schema"

JsonSchema = dict[str, Any]


def dumps_schema(schema: Mapping[str, Any]) -> str:
    """The committed text form: two-space indented JSON with a final newline."""
    return json.dumps(schema, indent=2) + "\n"


def schema_for(model: type, *, title: str) -> JsonSchema:
    """A complete schema document whose root is ``model``; nested classes go in ``$defs``."""
    walker = _Walker()
    root = walker.object_schema(model)
    document: JsonSchema = {"$schema": DIALECT, "title": title, **root}
    if walker.defs:
        document["$defs"] = {name: walker.defs[name] for name in sorted(walker.defs)}
    return document


class _Walker:
    def __init__(self) -> None:
        self.defs: dict[str, JsonSchema] = {}
        self._owners: dict[str, type] = {}

    def ref(self, model: type) -> JsonSchema:
        name = model.__name__
        owner = self._owners.get(name)
        if owner is not None and owner is not model:
            raise TypeError(f"two models named {name}: {owner!r} and {model!r}")
        if owner is None:
            self._owners[name] = model
            self.defs[name] = {}  # reserve the name first: models may refer to themselves
            self.defs[name] = self.object_schema(model)
        return {"$ref": f"#/$defs/{name}"}

    def object_schema(self, model: type) -> JsonSchema:
        hints = typing.get_type_hints(model)
        properties: dict[str, JsonSchema] = {}
        required: list[str] = []
        for field in attrs.fields(model):
            if field.metadata.get("internal"):
                continue  # not part of the JSON form (e.g. the plan's live inputs)
            prop = self.of(hints[field.name])
            description = field.metadata.get("description")
            if description:
                prop = {"description": str(description)} | {
                    k: v for k, v in prop.items() if k != "description"
                }
            default = _default_of(field)
            if default is attrs.NOTHING:
                required.append(field.name)
            elif default is not None:
                prop["default"] = default
            properties[field.alias or field.name] = prop
        schema: JsonSchema = {"type": "object"}
        doc = _docstring(model)
        if doc:
            schema["description"] = doc
        schema["properties"] = properties
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema

    def of(self, tp: Any) -> JsonSchema:
        if tp in fields.PATTERNS:
            return _pattern_schema(tp)
        if tp in fields.BOUNDS:
            return _bounded_schema(tp)
        supertype = getattr(tp, "__supertype__", None)
        if supertype is not None:
            return self.of(supertype)
        simple = _SIMPLE.get(tp)
        if simple is not None:
            return dict(simple)
        if tp is Any or tp is object:
            return {}
        if attrs.has(tp):
            return self.ref(tp)
        origin = get_origin(tp)
        args = get_args(tp)
        if origin is Literal:
            values = list(args)
            return {"const": values[0]} if len(values) == 1 else {"enum": values}
        if origin in (typing.Union, types.UnionType):
            return self.union(args)
        if origin in (list, tuple, set, frozenset, Sequence):
            item = args[0] if args else Any
            return {"type": "array", "items": self.of(item)}
        if origin in (dict, Mapping):
            key, value = args if len(args) == 2 else (str, Any)
            schema: JsonSchema = {"type": "object"}
            key_schema = self.of(key)
            if key_schema != {"type": "string"}:
                schema["propertyNames"] = key_schema
            schema["additionalProperties"] = self.of(value)
            return schema
        raise TypeError(f"no JSON Schema rule for {tp!r}; teach kvenv.model.schema this type")

    def union(self, members: tuple[Any, ...]) -> JsonSchema:
        present = [m for m in members if m is not type(None)]
        if len(present) > 1 and all(convert.kind_of(m) for m in present):
            inner: JsonSchema = {"oneOf": [self.ref(m) for m in present]}
        elif len(present) == 1:
            inner = self.of(present[0])
        else:
            inner = {"anyOf": [self.of(m) for m in present]}
        if len(present) == len(members):
            return inner
        return {"anyOf": [inner, {"type": "null"}]}


_SIMPLE: dict[Any, JsonSchema] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _pattern_schema(tp: object) -> JsonSchema:
    pattern, fix = fields.PATTERNS[tp]
    schema: JsonSchema = {"type": "string", "pattern": f"^(?:{pattern})$"}
    if tp in fields.NO_TRAVERSAL:
        schema["not"] = {"pattern": fields.TRAVERSAL}
    schema["description"] = fix
    return schema


def _bounded_schema(tp: object) -> JsonSchema:
    base, low, high, exclusive, _ = fields.BOUNDS[tp]
    as_number = int if base is int else float
    schema: JsonSchema = {"type": "integer" if base is int else "number"}
    schema["exclusiveMinimum" if exclusive else "minimum"] = as_number(low)
    if high is not None:
        schema["maximum"] = as_number(high)
    return schema


def _default_of(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    if default is attrs.NOTHING:
        return attrs.NOTHING
    factory = getattr(default, "factory", None)  # an attrs.Factory
    if callable(factory):
        if getattr(default, "takes_self", False):
            return None
        default = factory()
    return convert.unstructure(default)


def _docstring(model: type) -> str:
    doc = model.__doc__
    if not doc or doc.startswith(f"{model.__name__}("):  # attrs' generated placeholder
        return ""
    first_paragraph = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(first_paragraph.split())
