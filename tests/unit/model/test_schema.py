"""The JSON Schemas: committed files equal the generated ones; the generator follows the
converter's rules; the built-in data validates against them."""

from __future__ import annotations

import json
import re
from typing import Literal

import attrs
import pytest

from kvenv._util import tomlio
from kvenv._util.resources import data_dir
from kvenv.cli import main, schemas
from kvenv.errors import UsageError
from kvenv.model import fields, schema
from kvenv.model.loading import SCHEMA_LINE
from tests.support.jsonschema_subset import validate
from tests.support.paths import REPO

ROOT = REPO


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_committed_schema_equals_generated(name: str) -> None:
    committed = ROOT / "schemas" / f"{name}.schema.json"
    assert committed.is_file(), f"run: kvenv schema {name} > schemas/{name}.schema.json"
    assert committed.read_text(encoding="utf-8") == schema.dumps_schema(schemas.generate(name)), (
        f"schemas/{name}.schema.json is stale; regenerate it with: "
        f"kvenv schema {name} > schemas/{name}.schema.json"
    )


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_cli_prints_the_same_document(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", name]) == 0
    assert capsys.readouterr().out == schema.dumps_schema(schemas.generate(name))


def test_unknown_schema_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError):
        schemas.generate("nope")
    assert main(["schema", "nope"]) == 2
    assert "known schemas: " + ", ".join(sorted(schemas.SCHEMAS)) in capsys.readouterr().err


def test_every_schema_is_draft_2020_12_with_closed_objects() -> None:
    for name in schemas.SCHEMAS:
        document = schemas.generate(name)
        assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        objects = [document, *document.get("$defs", {}).values()]
        for obj in objects:
            assert obj["type"] == "object"
            assert obj["additionalProperties"] is False
        text = json.dumps(document)
        for ref in re.findall(r'"#/\$defs/([^"]+)"', text):
            assert ref in document["$defs"]


def test_builtin_profile_validates_and_names_its_schema() -> None:
    profile_schema = schemas.generate("profile")
    paths = sorted(data_dir("profiles").glob("*.toml"))
    assert {p.name for p in paths} >= {"demo.toml", "kaggle-t4x2-cu128.toml"}, paths
    for path in paths:
        assert validate(tomlio.read(path), profile_schema) == [], path
        assert path.read_text(encoding="utf-8").splitlines()[0] == SCHEMA_LINE
        target = (path.parent / SCHEMA_LINE.split(" ", 1)[1]).resolve()
        assert target == (data_dir("schemas") / "profile.schema.json").resolve()


def test_builtin_host_snapshot_validates() -> None:
    host_schema = schemas.generate("host")
    paths = sorted(data_dir("profiles").glob("*.host.json"))
    assert {p.name for p in paths} >= {"kaggle-t4x2-cu128.host.json"}, paths
    for path in paths:
        assert validate(json.loads(path.read_text(encoding="utf-8")), host_schema) == [], path


def test_patterns_and_bounds_come_from_fields() -> None:
    defs = schemas.generate("profile")["$defs"]
    revision = defs["HfSource"]["properties"]["revision"]
    assert revision["pattern"] == f"^(?:{fields.PATTERNS[fields.Revision][0]})$"
    assert defs["Gpu"]["properties"]["count"] == {"type": "integer", "minimum": 1}
    utilization = defs["Runtime"]["properties"]["gpu_memory_utilization"]["anyOf"][0]
    assert utilization == {"type": "number", "exclusiveMinimum": 0.0, "maximum": 1.0}
    lock = defs["Overlay"]["properties"]["lock"]["anyOf"][0]
    assert lock["not"] == {"pattern": fields.TRAVERSAL}


def test_tagged_union_is_one_of_with_const_kind() -> None:
    document = schemas.generate("profile")
    source = document["$defs"]["Native"]["properties"]["source"]
    refs = [s["$ref"].rsplit("/", 1)[1] for s in source["oneOf"]]
    assert refs == ["HfSource", "UrlSource", "PathSource", "IndexSource"]
    kinds = [document["$defs"][r]["properties"]["kind"]["const"] for r in refs]
    assert kinds == ["hf", "url", "path", "index"]
    assert "kind" not in document["$defs"]["HfSource"].get("required", [])
    assert "kind" in document["$defs"]["UrlSource"]["required"]


@attrs.frozen
class _Inner:
    """Inner thing.

    More text that is not the description."""

    flag: bool


@attrs.frozen
class _Sample:
    count: fields.PositiveInt
    mode: Literal["a", "b"]
    labels: dict[fields.EnvName, str]
    items: list[_Inner]
    maybe: fields.Sha256 | None = None
    note: str = attrs.field(default="x", metadata={"description": "a note"})


def test_generator_rules_on_a_small_model() -> None:
    document = schema.schema_for(_Sample, title="sample")
    props = document["properties"]
    assert document["required"] == ["count", "mode", "labels", "items"]
    assert props["mode"] == {"enum": ["a", "b"]}
    assert props["labels"]["propertyNames"]["pattern"].startswith("^(?:[A-Za-z_]")
    assert props["labels"]["additionalProperties"] == {"type": "string"}
    assert props["items"] == {"type": "array", "items": {"$ref": "#/$defs/_Inner"}}
    assert props["maybe"]["anyOf"][1] == {"type": "null"}
    assert props["note"] == {"description": "a note", "type": "string", "default": "x"}
    assert document["$defs"]["_Inner"]["description"] == "Inner thing."
    good = {"count": 1, "mode": "a", "labels": {"A_1": "x"}, "items": [{"flag": True}]}
    assert validate(good, document) == []
    assert validate({**good, "count": 0}, document)
    assert validate({**good, "count": True}, document)
    assert validate({**good, "labels": {"1A": "x"}}, document)
    assert validate({**good, "items": [{"flag": 1}]}, document)
    assert validate({**good, "extra": 1}, document)


def test_an_unsupported_type_is_refused_at_generation() -> None:
    @attrs.frozen
    class Odd:
        when: complex

    with pytest.raises(TypeError, match="no JSON Schema rule"):
        schema.schema_for(Odd, title="odd")
