"""A pure-Python target (``abi = "none"``): any CPython at or above ``python`` qualifies."""

from __future__ import annotations

import attrs
import pytest

from kvenv.errors import ProfileError
from kvenv.model.loading import load_profile
from kvenv.model.profile import Target
from kvenv.model.snapshot import HostSnapshot, PlatformInfo, PythonInfo
from kvenv.model.target import TargetEnv
from kvenv.probe.checks import check_host
from tests.support.profiles import loads_profile

PURE = Target(python="3.10", abi="none")


def _host(version: str, abi: str, os: str = "linux", machine: str = "aarch64") -> HostSnapshot:
    return HostSnapshot(
        schema=1,
        python=PythonInfo(version=version, implementation="cpython", abi=abi),
        platform=PlatformInfo(os=os, machine=machine),
    )


def test_only_none_any_tags_up_to_the_minimum_python() -> None:
    env = TargetEnv.from_profile_target(PURE)
    assert all(t.abi == "none" and t.platform == "any" for t in env.tags())
    assert env.supports_wheel("mdurl-0.1.2-py3-none-any.whl")
    assert env.supports_wheel("old-1.0-py310-none-any.whl")
    assert not env.supports_wheel("new-1.0-py312-none-any.whl")
    assert not env.supports_wheel("nat-1.0-cp310-cp310-manylinux_2_17_x86_64.whl")
    assert env.requires_python() == ">=3.10.0"
    assert env.environment_marker() == (
        'implementation_name == "cpython" and python_full_version >= "3.10.0"'
    )


@pytest.mark.parametrize(("version", "abi"), [("3.10.4", "cp310"), ("3.13.1", "cp313")])
def test_any_newer_cpython_on_any_platform_passes(version: str, abi: str) -> None:
    profile = attrs.evolve(load_profile("demo").profile, target=PURE)
    findings = check_host(profile, _host(version, abi, os="darwin"), strict=True)
    assert [f for f in findings if f.status != "pass"] == []


def test_an_older_python_is_an_error_even_without_strict() -> None:
    profile = attrs.evolve(load_profile("demo").profile, target=PURE)
    findings = {f.check: f for f in check_host(profile, _host("3.9.18", "cp39"))}
    assert findings["Python version"].status == "error"
    assert ">= 3.10" in findings["Python version"].message


def test_a_mismatched_abi_is_still_refused_for_binary_targets() -> None:
    text = 'schema = 1\nname = "x"\n[target]\npython = "3.12"\nabi = "cp311"\n'
    with pytest.raises(ProfileError) as info:
        loads_profile(text)
    assert "'none' for a pure-Python target" in info.value.render()
    loads_profile(text.replace('"cp311"', '"none"'))


def test_the_demo_lock_is_pure() -> None:
    loaded = load_profile("demo")
    assert loaded.profile.target is not None and loaded.profile.target.pure
    text = loaded.lock_path.read_text()
    assert 'requires-python = ">=3.10.0"' in text
    assert "manylinux" not in text
