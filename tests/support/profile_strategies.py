"""Hypothesis strategies built from kvenv's attrs models (any model, not only the profile).

``models(cls)`` walks the model's field types the way the converter does: the constrained
NewTypes of ``kvenv.model.fields`` (regex patterns, bounds), ``Literal``, ``X | None``, lists,
tables
and the ``kind``-tagged unions. ``valid_profiles()`` then repairs the few rules that span fields
(ABI matches Python, TP within the GPU count, no duplicates, native not protected, wheel file
name matching the native name and version), so every example passes ``check_profile``.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

import attrs
from hypothesis import strategies as st

from kvenv.model import cpuisa, fields
from kvenv.model.loading import canonicalize_name, requirement_name
from kvenv.model.profile import HfSource, IndexSource, Profile

_VERSION = (
    r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}((a|b|rc)[0-9]{1,2})?(\.post[0-9])?(\.dev[0-9])?"
    r"(\+[a-z0-9]{1,8}(\.[a-z0-9]{1,8})?)?"
)

_REQUIREMENT = (
    r"[a-z][a-z0-9-]{0,8}[a-z0-9](\[[a-z]{1,5}\])?(>=[0-9]{1,2}(\.[0-9]{1,2})?)?"
    r"(; python_version >= \"3\.[0-9]{1,2}\")?"
)

OVERRIDES: dict[object, st.SearchStrategy[Any]] = {
    fields.Pep440Version: st.from_regex(_VERSION, fullmatch=True),
    fields.Requirement508: st.from_regex(_REQUIREMENT, fullmatch=True),
}


def _pattern(kind: object) -> st.SearchStrategy[str]:
    pattern, _ = fields.PATTERNS[kind]
    return st.from_regex(pattern, fullmatch=True).filter(lambda v: fields.check(kind, v) is None)


def _bounded(kind: object) -> st.SearchStrategy[Any]:
    base, low, high, exclusive, _ = fields.BOUNDS[kind]
    if base is int:
        return st.integers(min_value=int(low), max_value=int(high) if high else 2**40)
    return st.floats(min_value=low, max_value=high, exclude_min=exclusive, allow_nan=False)


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    if tp in OVERRIDES:
        return OVERRIDES[tp]
    if tp in fields.PATTERNS:
        return _pattern(tp)
    if tp in fields.BOUNDS:
        return _bounded(tp)
    if hasattr(tp, "__supertype__"):
        return strategy_for(tp.__supertype__)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: st.text(max_size=20),
        int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
        float: st.floats(allow_nan=False),
        bool: st.booleans(),
    }
    if tp in simple:
        return simple[tp]
    if attrs.has(tp):
        return models(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        inner = st.one_of([strategy_for(a) for a in present])
        return st.none() | inner if len(present) < len(args) else inner
    if origin is list:
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=3)
    raise TypeError(f"no strategy for {tp!r}")


def models(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: strategy_for(hints[f.name]) for f in attrs.fields(cls)})


def _repair(profile: Profile) -> Profile:
    target = profile.target
    if target is not None and target.implementation == "cpython":
        abi = "cp" + target.python_version.replace(".", "")
        target = attrs.evolve(target, abi=fields.NonEmpty(abi))
    if target is not None and target.cpu is not None:
        known = cpuisa.ARCHES.get(target.machine)
        features = [f for f in dict.fromkeys(target.cpu.features) if known is None or f in known]
        level = target.cpu.level if known in (None, cpuisa.X86_FEATURES) else None
        target = attrs.evolve(target, cpu=attrs.evolve(target.cpu, level=level, features=features))
    runtime = profile.runtime
    tp = runtime.tensor_parallel_size
    if target is not None and target.gpu is not None and tp is not None:
        runtime = attrs.evolve(
            runtime, tensor_parallel_size=fields.PositiveInt(min(tp, target.gpu.count))
        )
    native = profile.native
    protected = list({canonicalize_name(n): n for n in profile.host.protected}.values())
    if native is not None:
        protected = [n for n in protected if canonicalize_name(n) != canonicalize_name(native.name)]
        if native.provided_libs is not None:
            libs = [x for x in native.provided_libs if "/" not in x and x.strip() == x]
            native = attrs.evolve(native, provided_libs=list(dict.fromkeys(libs)))
        source = native.source
        if isinstance(source, (HfSource, IndexSource)) and source.filename is not None:
            wheel = f"{native.name.replace('-', '_')}-{native.version}-py3-none-any.whl"
            source = attrs.evolve(source, filename=fields.WheelFilename(wheel))
            native = attrs.evolve(native, source=source)
    waivers = list({canonicalize_name(w.name): w for w in profile.host.waivers}.values())
    host = attrs.evolve(profile.host, protected=protected, waivers=waivers)
    sacred = {canonicalize_name(n) for n in protected}
    record_waivers = [
        w
        for w in {canonicalize_name(w.name): w for w in profile.overlay.record_waivers}.values()
        if canonicalize_name(w.name) not in sacred
    ]
    allow_pth = list({canonicalize_name(w.name): w for w in profile.overlay.allow_pth}.values())
    native_key = canonicalize_name(native.name) if native is not None else None
    requires = list(
        {
            requirement_name(r): r
            for r in profile.overlay.requires
            if requirement_name(r) not in sacred and requirement_name(r) != native_key
        }.values()
    )
    constraints = [c for c in profile.overlay.constraints if requirement_name(c) != native_key]
    overlay = attrs.evolve(
        profile.overlay,
        record_waivers=record_waivers,
        allow_pth=allow_pth,
        requires=requires,
        constraints=constraints,
    )
    return attrs.evolve(
        profile, target=target, runtime=runtime, native=native, host=host, overlay=overlay
    )


def valid_profiles() -> st.SearchStrategy[Profile]:
    return models(Profile).map(_repair)
