"""Properties of the lock engine over generated package universes (in memory):

- a result is a consistent closure for the target exactly when one exists (a brute-force
  oracle decides), else a ConflictError;
- it never contains a protected name;
- it is deterministic;
- ``--check`` accepts every produced lock and rejects each single mutation of it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomllib
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from kvenv.errors import ConflictError, LockError
from kvenv.lock.check import check_lock
from kvenv.lock.engine import lock_with_universe
from kvenv.lock.finder import WheelFile
from kvenv.lock.metadata import DistMetadata
from kvenv.lock.native import NativeRequires
from kvenv.lock.pylock import LockFile, parse_lock
from kvenv.model.loading import LoadedProfile
from kvenv.model.snapshot import HostSnapshot, snapshot_from_dict
from kvenv.model.target import TargetEnv
from tests.support.lockenv import write_project

NAMES = ["a", "b", "c", "d"]
VERSIONS = ["1.0", "2.0", "3.0"]
TORCH_INDEX = ["2.10.0", "2.13.0"]
SPECS = ["", ">=2.0", "<2.0", "==1.0", "!=3.0", ">=3.0"]
MARKERS = [None, None, 'python_version > "3.11"', 'sys_platform == "win32"']

Universe = dict[str, dict[str, list[str]]]  # name -> version -> Requires-Dist lines


class FakeUniverse:
    def __init__(self, packages: Universe) -> None:
        self.packages = packages

    def _wheel(self, name: str, version: str) -> WheelFile:
        filename = f"{name}-{version}-py3-none-any.whl"
        return WheelFile(
            name=NormalizedName(name),
            version=Version(version),
            filename=filename,
            url=f"https://wheels.invalid/{filename}",
            rank=0,
            sha256=hashlib.sha256(filename.encode()).hexdigest(),
            size=100 + len(filename),
        )

    def versions(self, name: NormalizedName) -> Sequence[WheelFile]:
        found = self.packages.get(name, {})
        ordered = sorted(found, key=Version, reverse=True)
        return [self._wheel(name, v) for v in ordered]

    def seen_versions(self, name: NormalizedName) -> Sequence[str]:
        return sorted(self.packages.get(name, {}), key=Version, reverse=True)

    def metadata(self, wheel: WheelFile) -> DistMetadata:
        requires = self.packages[wheel.name][str(wheel.version)]
        return DistMetadata(wheel.name, wheel.version, tuple(requires))

    def prefetch(self, wanted: Sequence[tuple[NormalizedName, SpecifierSet]]) -> None:
        return None

    def complete(self, wheels: Sequence[WheelFile]) -> list[WheelFile]:
        return list(wheels)


@st.composite
def requirement(draw: st.DrawFn, owner: str | None) -> str:
    names = [n for n in [*NAMES, "torch"] if n != owner]
    name = draw(st.sampled_from(names))
    if name == "torch":
        spec = draw(st.sampled_from(["", "==2.10.0", "==2.13.0", ">=2.11"]))
    else:
        spec = draw(st.sampled_from(SPECS))
    extra = "[x]" if name != "torch" and draw(st.integers(0, 4)) == 0 else ""
    marker = draw(st.sampled_from(MARKERS))
    return f"{name}{extra}{spec}" + (f"; {marker}" if marker else "")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Universe, list[dict[str, Any]], list[str]]:
    packages: Universe = {}
    for name in NAMES:
        versions = draw(st.lists(st.sampled_from(VERSIONS), max_size=3, unique=True))
        packages[name] = {}
        for version in versions:
            deps = draw(st.lists(requirement(name), max_size=2))
            if draw(st.booleans()):
                extra_dep = draw(requirement(name)).split(";")[0]
                deps.append(f'{extra_dep}; extra == "x"')
            packages[name][version] = deps
    packages["torch"] = {v: [] for v in TORCH_INDEX}
    host: list[dict[str, Any]] = [{"name": "torch", "version": "2.10.0"}]
    for name in NAMES:
        kind = draw(st.sampled_from(["absent", "absent", "unknown", "1.0", "3.0"]))
        if kind == "unknown":
            host.append({"name": name})
        elif kind != "absent":
            host.append({"name": name, "version": kind, "requires": []})
    native = draw(st.lists(requirement(None), min_size=1, max_size=3))
    return packages, host, native


# the brute-force oracle ----------------------------------------------------------------------
def _consistent(
    choice: dict[str, str | None],
    packages: Universe,
    native: list[str],
    target: TargetEnv,
    unknown: set[str],
) -> bool:
    """Does ``choice`` (name -> version, ``"host?"`` for an unknown host version, None absent)
    satisfy every requirement reachable from the native wheel?"""
    queue = [(line, frozenset[str]()) for line in native]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        line, extras = queue.pop()
        req = Requirement(line)
        if req.marker is not None and not target.evaluate(req.marker, extras):
            continue
        name = canonicalize_name(req.name)
        version = choice.get(name)
        if version is None:
            return False
        if version == "host?":
            continue
        if not req.specifier.contains(version, prereleases=True):
            return False
        wanted = frozenset(req.extras)
        if (name, wanted) in seen or name in unknown or name == "torch":
            continue
        seen.add((name, wanted))
        if version in packages.get(name, {}) and not _is_host(choice, name):
            queue.extend((dep, wanted) for dep in packages[name][version])
    return True


def _is_host(choice: dict[str, str | None], name: str) -> bool:
    return choice.get(f"{name}@host") == "yes"


def solvable(
    packages: Universe, host: list[dict[str, Any]], native: list[str], target: TargetEnv
) -> bool:
    host_versions = {h["name"]: h.get("version") for h in host}
    {n for n, v in host_versions.items() if v is None}
    options: list[list[tuple[str | None, bool]]] = []
    for name in NAMES:
        opts: list[tuple[str | None, bool]] = [(None, False)]
        if name in host_versions:
            opts.append((host_versions[name] or "host?", True))
        opts.extend((v, False) for v in packages[name])
        options.append(opts)
    for combo in itertools.product(*options):
        choice: dict[str, str | None] = {"torch": "2.10.0"}
        for name, (version, on_host) in zip(NAMES, combo, strict=True):
            choice[name] = version
            if on_host:
                choice[f"{name}@host"] = "yes"
        if _consistent(choice, packages, native, target, set()):
            return True
    return False


# the properties ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> LoadedProfile:
    return write_project(tmp_path_factory.mktemp("props") / "p")


def _snapshot(host: list[dict[str, Any]]) -> HostSnapshot:
    return snapshot_from_dict(
        {
            "schema": 1,
            "python": {"version": "3.12.13"},
            "platform": {"os": "linux", "machine": "x86_64"},
            "distributions": host,
        }
    )


def _lock(loaded: LoadedProfile, data: dict[str, Any]) -> LockFile:
    pylock, table, tools = parse_lock(data, file="pylock.testbox.toml")
    return LockFile(Path("pylock.testbox.toml"), pylock, table, tools, data)


def _rejected(loaded: LoadedProfile, data: dict[str, Any], host: HostSnapshot) -> bool:
    try:
        lock = _lock(loaded, data)
    except LockError:
        return True
    return not check_lock(loaded, lock, host).ok


def _mutants(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for index, package in enumerate(doc["packages"]):
        dropped = copy.deepcopy(doc)
        dropped["packages"].pop(index)
        out.append((f"{package['name']} dropped", dropped))
        for label, edit in (
            ("hash removed", lambda p: p["wheels"][0].update(hashes={"md5": "0" * 32})),
            ("version changed", lambda p: p.update(version="99.0")),
            ("marker broken", lambda p: p.update(marker='sys_platform == "win32"')),
        ):
            mutant = copy.deepcopy(doc)
            edit(mutant["packages"][index])
            out.append((f"{package['name']} {label}", mutant))
    torch = copy.deepcopy(doc)
    filename = "torch-2.13.0-py3-none-any.whl"
    torch["packages"].append(
        {
            "name": "torch",
            "version": "2.13.0",
            "wheels": [
                {
                    "name": filename,
                    "url": f"https://wheels.invalid/{filename}",
                    "size": 9,
                    "hashes": {"sha256": "0" * 64},
                }
            ],
            "tool": {"kvenv": {"requires": []}},
        }
    )
    out.append(("torch added", torch))
    return out


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds())
def test_lock_properties(
    project: LoadedProfile, world: tuple[Universe, list[dict[str, Any]], list[str]]
) -> None:
    packages, host_dists, native = world
    loaded = project
    host = _snapshot(host_dists)
    assert loaded.profile.target is not None
    target = TargetEnv.from_profile_target(loaded.profile.target)
    universe = FakeUniverse(packages)
    requires = NativeRequires(tuple(native), "test")
    expected = solvable(packages, host_dists, native, target)
    event("solvable" if expected else "conflict")
    try:
        text, _resolution = lock_with_universe(loaded, universe, native=requires, host=host)
    except ConflictError:
        assert not expected, "a solution exists but the engine reported a conflict"
        return
    assert expected, "the engine produced a lock where the oracle finds none"
    again, _ = lock_with_universe(loaded, universe, native=requires, host=host)
    assert again == text
    doc = tomllib.loads(text)
    names = {p["name"] for p in doc["packages"]}
    assert not names & {"torch", "torchvision", "torchaudio"}
    event(f"{len(names)} packages locked")
    assert check_lock(loaded, _lock(loaded, doc), host).ok
    for label, mutant in _mutants(doc):
        assert _rejected(loaded, mutant, host), label
