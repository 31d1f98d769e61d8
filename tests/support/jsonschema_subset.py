"""A small JSON Schema (draft 2020-12) validator for exactly the keywords kvenv.model.schema emits.

An unknown keyword is an error, so the generator cannot start emitting something this validator
silently ignores. Patterns are matched with Python's ``re`` (the generated ones use only syntax
that means the same in ECMA-262).
"""

from __future__ import annotations

import re
from typing import Any

ANNOTATIONS = {"$schema", "$defs", "$comment", "title", "description", "default"}
ASSERTIONS = {
    "$ref",
    "type",
    "const",
    "enum",
    "pattern",
    "not",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "properties",
    "required",
    "additionalProperties",
    "propertyNames",
    "items",
    "anyOf",
    "oneOf",
}


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError(f"unknown type {name!r}")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def errors(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "$") -> list[str]:
    """Every violation of ``schema`` by ``value``, as ``path: reason`` lines."""
    unknown = set(schema) - ANNOTATIONS - ASSERTIONS
    if unknown:
        raise ValueError(f"keyword(s) outside the supported subset: {sorted(unknown)}")
    found: list[str] = []
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        found += errors(value, root["$defs"][name], root, at)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, t) for t in types):
            return [*found, f"{at}: not of type {schema['type']}"]
    if "const" in schema and not _equal(value, schema["const"]):
        found.append(f"{at}: not {schema['const']!r}")
    if "enum" in schema and not any(_equal(value, v) for v in schema["enum"]):
        found.append(f"{at}: not one of {schema['enum']!r}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{at}: does not match {schema['pattern']}")
    if "not" in schema and not errors(value, schema["not"], root, at):
        found.append(f"{at}: matches a forbidden schema")
    is_number = _is_type(value, "number")
    if is_number and "minimum" in schema and value < schema["minimum"]:
        found.append(f"{at}: below {schema['minimum']}")
    if is_number and "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        found.append(f"{at}: not above {schema['exclusiveMinimum']}")
    if is_number and "maximum" in schema and value > schema["maximum"]:
        found.append(f"{at}: above {schema['maximum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{at}.{key}: required")
        for key, item in value.items():
            if "propertyNames" in schema:
                found += errors(key, schema["propertyNames"], root, f"{at}.{key}")
            if key in properties:
                found += errors(item, properties[key], root, f"{at}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{at}.{key}: unknown key")
            elif isinstance(schema.get("additionalProperties"), dict):
                found += errors(item, schema["additionalProperties"], root, f"{at}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += errors(item, schema["items"], root, f"{at}[{index}]")
    if "anyOf" in schema and all(errors(value, s, root, at) for s in schema["anyOf"]):
        found.append(f"{at}: matches none of anyOf")
    if "oneOf" in schema:
        matches = sum(not errors(value, s, root, at) for s in schema["oneOf"])
        if matches != 1:
            found.append(f"{at}: matches {matches} of oneOf, not exactly 1")
    return found


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    return errors(value, schema, schema)
