"""Hypothesis properties of the profile loader: exact round trips, and nothing but a kvenv error
(or success) for any TOML document or text."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvenv._util import tomlio
from kvenv.cli import schemas
from kvenv.errors import KvenvError
from kvenv.model import convert
from kvenv.model.loading import dump_profile, load_profile, profile_to_dict
from kvenv.model.profile import Profile
from tests.support.jsonschema_subset import validate
from tests.support.paths import REPO
from tests.support.profile_strategies import valid_profiles
from tests.support.profiles import loads_profile

ROOT = REPO
BUILTIN = ROOT / "profiles" / "kaggle-t4x2-cu128.toml"
PROFILE_SCHEMA = schemas.generate("profile")
FIELD_NAMES = [
    "schema", "name", "description", "extends", "target", "host", "native", "overlay", "paths",
    "runtime", "python", "abi", "gpu", "count", "model", "protected", "waivers", "reason",
    "source", "kind", "revision", "sha256", "size", "lock", "root", "env", "dtype", "hf", "url",
]  # fmt: skip

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)


# --- round trip --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(valid_profiles())
def test_dump_then_load_is_exact(profile: Profile) -> None:
    text = dump_profile(profile)
    again = loads_profile(text)
    assert again == profile
    assert dump_profile(again) == text


@settings(max_examples=100, deadline=None)
@given(valid_profiles())
def test_unstructure_structure_is_exact_and_matches_the_schema(profile: Profile) -> None:
    data = profile_to_dict(profile)
    assert convert.structure(data, Profile, file=None, what="profile") == profile
    assert validate(data, PROFILE_SCHEMA) == []


def test_builtin_profile_round_trips_through_its_own_dump() -> None:
    profile = load_profile(str(BUILTIN)).profile
    assert loads_profile(dump_profile(profile)) == profile


# --- arbitrary input ---------------------------------------------------------------------------

keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=6)
scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["hf", "url", "path", "index", "cpython", "float16", "3.12", "cp312"])
    | st.dates()
    | st.datetimes()
    | st.times()
)
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=4),
    max_leaves=12,
)
documents = st.dictionaries(keys, values, max_size=8)


def _dumps(doc: dict[str, Any]) -> str:
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError):
        assume(False)
        raise


def _load_only_kvenv_errors(path: Path, cwd: Path) -> None:
    try:
        load_profile(str(path), cwd=cwd)
    except KvenvError as error:
        assert error.render()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_toml_document_gives_success_or_a_kvenv_error(
    workdir: Path, doc: dict[str, Any]
) -> None:
    path = workdir / "doc.toml"
    path.write_text(_dumps(doc), encoding="utf-8")
    _load_only_kvenv_errors(path, workdir)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


BASE = tomlio.read(BUILTIN)
BASE_PATHS = _paths(BASE)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASE_PATHS), values | st.just(KeyError), keys)
def test_one_mutation_of_the_builtin_gives_success_or_a_kvenv_error(
    workdir: Path, where: tuple[Any, ...], value: Any, extra_key: str
) -> None:
    doc = copy.deepcopy(BASE)
    node: Any = doc
    for key in where[:-1]:
        node = node[key]
    if value is KeyError:
        del node[where[-1]]
    else:
        node[where[-1]] = value
        if isinstance(value, dict):
            value.setdefault(extra_key, 1)
    path = workdir / "mutated.toml"
    path.write_text(_dumps(doc), encoding="utf-8")
    _load_only_kvenv_errors(path, workdir)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200) | st.sampled_from(["[a]\n[a]", "x = 1\nx = 2", 'a = """', "=\n"]))
def test_any_text_gives_success_or_a_kvenv_error(text: str) -> None:
    try:
        loads_profile(text)
    except KvenvError as error:
        assert error.render()


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_file_gives_success_or_a_kvenv_error(workdir: Path, raw: bytes) -> None:
    path = workdir / "bytes.toml"
    path.write_bytes(raw)
    _load_only_kvenv_errors(path, workdir)


def test_a_datetime_where_text_belongs_is_a_clear_error() -> None:
    doc = copy.deepcopy(BASE)
    doc["description"] = dt.datetime(2026, 8, 23, 12, 0)
    with pytest.raises(KvenvError) as info:
        loads_profile(tomli_w.dumps(doc), file="dated.toml")
    assert [p.path for p in info.value.problems] == ["$.description"]
