"""Hypothesis fuzzing of every parser: never a traceback, only a KvenvError (the documented
``HeaderError`` for a safetensors header, nothing at all for the tolerant nvidia-smi parsers)
or success.

Inputs are both arbitrary (random text, random JSON/TOML-shaped values) and near-valid (a real
profile, snapshot, lock or manifest with one value replaced by a random one), since near-valid
input reaches the deep checks. The default suite runs a few examples per parser; the ``slow``
variant runs many and records the counts in ``benchmarks/results/reliability.json``.
"""

from __future__ import annotations

import copy
import json
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvenv._util.elf import (
    MAX_DYNAMIC,
    MAX_NAME,
    MAX_NEEDED,
    MAX_PHENTSIZE,
    MAX_PHNUM,
    read_dynamic,
)
from kvenv._util.jsonio import loads_json
from kvenv._util.nesting import MAX_DEPTH, TooDeep
from kvenv._util.resources import data_dir
from kvenv._util.tomlio import loads as toml_loads
from kvenv.env.manifest import manifest_from_dict
from kvenv.env.wheelinstall import install_wheel
from kvenv.errors import KvenvError
from kvenv.lock.pylock import parse_lock
from kvenv.model.snapshot import snapshot_from_dict
from kvenv.probe.nvidia import parse_banner, parse_proc_version, parse_query, parse_sys_version
from kvenv.runtime.safetensors_header import HeaderError, parse_header
from tests.support.elfobjects import synthetic_elf
from tests.support.hardening import record_figures
from tests.support.profiles import loads_profile
from tests.support.safetensors_files import header_bytes
from tests.support.wheels import build_wheel

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
TOMLISH = st.recursive(
    st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=30)),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=10), inner, max_size=4)
    ),
    max_leaves=10,
)

BUILTIN = data_dir("profiles") / "kaggle-t4x2-cu128.toml"
SNAPSHOT = data_dir("profiles") / "kaggle-t4x2-cu128.host.json"
LOCK = data_dir("locks") / "pylock.kaggle-t4x2-cu128.toml"
MANIFEST: dict[str, Any] = {
    "schema": 1,
    "kvenv_version": "0.1.0",
    "created_at": "2026-01-01T00:00:00+00:00",
    "root": "/r",
    "dirs": {
        "generation": "g1",
        "native": "/r/generations/g1/native",
        "overlay": "/r/generations/g1/overlay",
        "bin": "/r/generations/g1/bin",
    },
    "profile": {"name": "t", "digest": "sha256:x", "path": "/p/t.toml"},
    "lock_digest": None,
    "native": None,
    "distributions": [],
    "activation": {
        "pythonpath": ["/r/generations/g1/overlay"],
        "path": [],
        "site_dirs": [],
        "ld_library_path": [],
        "env": {},
    },
    "protected": ["torch"],
    "host_protected": [],
    "python": "/usr/bin/python3",
    "notes": [],
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found += _paths(item, (*prefix, index))
    return found


def _mutate(document: Any, data: st.DataObject, values: st.SearchStrategy[Any]) -> Any:
    """``document`` with the value at one random path replaced (or deleted)."""
    result = copy.deepcopy(document)
    paths = [p for p in _paths(result) if p]
    path = data.draw(st.sampled_from(paths))
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(values)
    return result


def _accepting(call: Callable[[], object], *allowed: type[BaseException]) -> None:
    expected: tuple[type[BaseException], ...] = (KvenvError, *allowed)
    try:
        call()
    except expected:
        return


COUNTS: dict[str, int] = {}


def _count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


def fuzz_profile(data: st.DataObject) -> None:
    _count("profile")
    if data.draw(st.booleans()):
        text = data.draw(st.text(max_size=300))
    else:
        document = _mutate(toml_loads(BUILTIN.read_text(), file="x"), data, TOMLISH)
        try:
            text = tomli_w.dumps(document)
        except (TypeError, ValueError):
            return
    _accepting(lambda: loads_profile(text, file="fuzz.toml"))


def fuzz_snapshot(data: st.DataObject) -> None:
    _count("host-snapshot")
    base = json.loads(SNAPSHOT.read_text())
    document = data.draw(JSON) if data.draw(st.booleans()) else _mutate(base, data, JSON)
    _accepting(lambda: snapshot_from_dict(document, file="fuzz.json"))


def fuzz_lock(data: st.DataObject) -> None:
    _count("pylock")
    base = toml_loads(LOCK.read_text(), file="x")
    document = data.draw(TOMLISH) if data.draw(st.booleans()) else _mutate(base, data, TOMLISH)
    if isinstance(document, dict):
        _accepting(lambda: parse_lock(document, file="fuzz.toml"))


def fuzz_manifest(data: st.DataObject) -> None:
    _count("manifest")
    document = data.draw(JSON) if data.draw(st.booleans()) else _mutate(MANIFEST, data, JSON)
    _accepting(lambda: manifest_from_dict(document, file="fuzz.json", root=Path("/r")))


def fuzz_safetensors(data: st.DataObject) -> None:
    _count("safetensors-header")
    if data.draw(st.booleans()):
        raw = data.draw(st.binary(max_size=200))
        size = len(raw) + 8 + data.draw(st.integers(0, 1 << 20))
    else:
        header = header_bytes({"a": ("F16", [2, 3]), "b": ("I8", [4])})[8:]
        document = _mutate(json.loads(header), data, JSON)
        raw = json.dumps(document).encode()
        size = len(raw) + 8 + data.draw(st.integers(0, 64))
    _accepting(lambda: parse_header(raw, file_size=size), HeaderError)
    _ = struct  # the header layout is documented in kvenv.runtime.safetensors_header


def fuzz_nvidia(data: st.DataObject) -> None:
    _count("nvidia-smi")
    rows = st.lists(
        st.lists(
            st.text(max_size=12) | st.sampled_from(["0", "Tesla T4", "7.5", "15360"]), max_size=6
        ).map(", ".join),
        max_size=4,
    ).map("\n".join)
    text = data.draw(rows | st.text(max_size=200))
    parse_query(text)
    parse_query(text, with_cc=False)
    parse_banner(text)
    parse_proc_version(text)
    parse_sys_version(text)


NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,8}", fullmatch=True)
VERSIONS = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True) | st.text(max_size=8)


def fuzz_wheel(data: st.DataObject) -> None:
    _count("wheel-install")
    name = data.draw(NAMES)
    version = data.draw(VERSIONS)
    files = data.draw(
        st.dictionaries(st.text(min_size=1, max_size=20), st.binary(max_size=20), max_size=3)
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        try:
            wheel = build_wheel(
                base / "w",
                name,
                version,
                files=files or None,
                requires=data.draw(st.lists(st.text(max_size=15), max_size=2)),
            )
        except (OSError, ValueError):
            return  # the builder itself cannot write this name
        target = base / "site"
        _accepting(lambda: install_wheel(wheel, target, protected=("torch",), bin_dir=base / "bin"))


def fuzz_nesting(data: st.DataObject) -> None:
    """Tables and arrays nested to a random depth, in TOML or JSON text: parsed when within
    the limit, else :class:`TooDeep` naming the ``$.path`` of the first container past it
    (``MAX_DEPTH`` steps below ``$``), never a ``RecursionError``."""
    _count("nesting")
    toml = data.draw(st.booleans())
    kinds = data.draw(st.lists(st.sampled_from("[{"), min_size=1, max_size=3000))
    key = "k = " if toml else '"k": '
    opening = "".join("[" if kind == "[" else "{" + key for kind in kinds)
    closing = "".join("]" if kind == "[" else "}" for kind in reversed(kinds))
    depth = len(kinds) + (1 if toml else 0)  # a TOML document is a table itself
    try:
        if toml:
            toml_loads(f"x = {opening}1{closing}\n", file="fuzz.toml")
        else:
            loads_json(f"{opening}1{closing}", file="fuzz.json")
    except TooDeep as error:
        assert depth > MAX_DEPTH, error.render()
        (problem,) = error.problems
        assert problem.file in ("fuzz.toml", "fuzz.json") and problem.path is not None
        assert problem.path.count(".") + problem.path.count("[") == MAX_DEPTH, problem.path
    else:
        assert depth <= MAX_DEPTH


ELF_NAMES = st.lists(
    st.from_regex(r"lib[a-z0-9_]{1,8}\.so(\.[0-9]{1,2})?", fullmatch=True), max_size=4
)


def fuzz_elf(data: st.DataObject) -> None:
    """The ELF dynamic-section reader: a shared object, random or a valid one with random
    bytes and header fields overwritten, gives its facts, None (not ELF) or an ElfError; and
    it never asks for more than its bounds allow, whatever the headers claim."""
    _count("elf-dynamic")
    if data.draw(st.booleans()):
        raw = bytearray(b"\x7fELF" + data.draw(st.binary(max_size=300)))
    else:
        raw = bytearray(
            synthetic_elf(
                data.draw(ELF_NAMES),
                data.draw(st.none() | st.just("libself.so.1")),
                bits=data.draw(st.sampled_from([32, 64])),
                order=data.draw(st.sampled_from(["<", ">"])),
            )
        )
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(raw) - 1))
            width = data.draw(st.sampled_from([1, 2, 4, 8]))
            value = data.draw(st.integers(0, (1 << (8 * width)) - 1))
            raw[at : at + width] = value.to_bytes(width, "little")[: len(raw) - at]
    asked = [0]

    def read_at(offset: int, size: int) -> bytes:
        asked[0] += size
        return bytes(raw[offset : offset + size]) if offset >= 0 else b""

    _accepting(lambda: read_dynamic(read_at))
    # headers, the program headers, the dynamic segment, one bounded read per name: ~6 MiB
    limit = 16 + 64 + MAX_PHNUM * MAX_PHENTSIZE + MAX_DYNAMIC + (MAX_NEEDED + 1) * MAX_NAME
    assert asked[0] <= limit


FUZZERS: dict[str, Callable[[st.DataObject], None]] = {
    "nesting": fuzz_nesting,
    "elf-dynamic": fuzz_elf,
    "profile": fuzz_profile,
    "host-snapshot": fuzz_snapshot,
    "pylock": fuzz_lock,
    "manifest": fuzz_manifest,
    "safetensors-header": fuzz_safetensors,
    "nvidia-smi": fuzz_nvidia,
    "wheel-install": fuzz_wheel,
}
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("parser", sorted(FUZZERS))
@FAST
@given(data=st.data())
def test_fuzz(parser: str, data: st.DataObject) -> None:
    FUZZERS[parser](data)


@pytest.mark.slow
@pytest.mark.parametrize("parser", sorted(FUZZERS))
def test_fuzz_exhaustive(parser: str) -> None:
    COUNTS.pop(parser, None)

    @SLOW
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        FUZZERS[parser](data)

    run()
    figures = {"examples": COUNTS.get(parser, 0), "tracebacks": 0}
    record_figures(f"fuzz.{parser}", figures)
