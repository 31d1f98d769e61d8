"""The target environment: marker values and wheel tags of the profile's target, never the
running machine's."""

from __future__ import annotations

import attrs
import pytest
from packaging.markers import Marker
from packaging.tags import Tag

from kvenv.errors import InputError
from kvenv.model.profile import Target
from kvenv.model.snapshot import HostSnapshot, read_snapshot
from kvenv.model.target import TargetEnv, manylinux_platforms, target_from_host
from tests.support.paths import REPO


def kaggle() -> TargetEnv:
    return TargetEnv.from_profile_target(
        Target(python="3.12.13", abi="cp312", os="linux", machine="x86_64", glibc="2.35")
    )


def test_markers_are_the_targets_not_the_running_machines() -> None:
    env = kaggle().markers()
    assert env["python_version"] == "3.12"
    assert env["python_full_version"] == "3.12.13"
    assert env["implementation_name"] == "cpython"
    assert env["implementation_version"] == "3.12.13"
    assert env["platform_python_implementation"] == "CPython"
    assert env["sys_platform"] == "linux"
    assert env["platform_system"] == "Linux"
    assert env["platform_machine"] == "x86_64"
    assert env["os_name"] == "posix"


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('python_version > "3.11"', True),
        ('python_version < "3.12"', False),
        ('sys_platform == "win32"', False),
        ('platform_machine == "aarch64"', False),
        ('implementation_name == "cpython" and os_name == "posix"', True),
        ('platform_release >= "5"', False),  # unknown for a target: never matches
    ],
)
def test_marker_evaluation(marker: str, expected: bool) -> None:
    assert kaggle().evaluate(Marker(marker)) is expected


def test_extra_markers_use_the_given_extras() -> None:
    target = kaggle()
    marker = Marker('extra == "fast"')
    assert target.evaluate(marker, frozenset({"fast"}))
    assert not target.evaluate(marker)
    assert not target.evaluate(marker, frozenset({"slow"}))


def test_manylinux_levels_from_the_target_glibc_down() -> None:
    platforms = manylinux_platforms((2, 35), "x86_64")
    assert platforms[0] == "manylinux_2_35_x86_64"
    assert platforms[-1] == "manylinux1_x86_64"
    assert platforms.index("manylinux_2_17_x86_64") + 1 == platforms.index("manylinux2014_x86_64")
    assert "manylinux_2_36_x86_64" not in platforms
    assert manylinux_platforms((2, 28), "aarch64")[-1] == "manylinux2014_aarch64"


def test_tags_are_ordered_and_for_the_target_python() -> None:
    target = kaggle()
    tags = target.tags()
    assert tags[0] == Tag("cp312", "cp312", "manylinux_2_35_x86_64")
    assert Tag("cp312", "abi3", "manylinux_2_17_x86_64") in tags
    assert Tag("py3", "none", "any") in tags
    assert Tag("cp312", "cp312", "linux_x86_64") in tags
    assert all(t.abi != "cp311" for t in tags)
    assert Tag("cp311", "abi3", "manylinux_2_17_x86_64") in tags
    assert target.platforms[-1] == "linux_x86_64"


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("a-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("a-1-cp312-cp312-manylinux_2_39_x86_64.whl", False),
        ("a-1-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("a-1-cp312-cp312-win_amd64.whl", False),
        ("a-1-py3-none-any.whl", True),
        ("a-1-cp310-abi3-manylinux_2_28_x86_64.whl", True),
        ("not-a-wheel.tar.gz", False),
    ],
)
def test_wheel_compatibility(filename: str, fits: bool) -> None:
    assert kaggle().supports_wheel(filename) is fits


def test_more_specific_wheels_rank_first() -> None:
    target = kaggle()
    native = target.wheel_rank("a-1-cp312-cp312-manylinux_2_28_x86_64.whl")
    pure = target.wheel_rank("a-1-py3-none-any.whl")
    assert native is not None and pure is not None and native < pure


def test_explicit_platforms_are_used_as_given() -> None:
    target = TargetEnv.from_profile_target(
        Target(
            python="3.11",
            abi="cp311",
            os="darwin",
            machine="arm64",
            platforms=["macosx_14_0_arm64"],
        )
    )
    assert target.python_full_version == "3.11.0"
    assert target.platforms == ("macosx_14_0_arm64",)
    assert target.markers()["sys_platform"] == "darwin"
    assert target.supports_wheel("a-1-cp311-cp311-macosx_14_0_arm64.whl")


def test_a_target_without_derivable_platforms_says_how_to_fix_it() -> None:
    with pytest.raises(InputError) as info:
        TargetEnv.from_profile_target(Target(python="3.12", abi="cp312", os="darwin"))
    assert info.value.problems[0].path == "$.target.platforms"


def test_environment_marker_holds_on_the_target_only() -> None:
    target = kaggle()
    marker = Marker(target.environment_marker())
    assert target.evaluate(marker)
    other = TargetEnv.from_profile_target(Target(python="3.11.4", abi="cp311", glibc="2.35"))
    assert not other.evaluate(marker)


# --- the target of a host ------------------------------------------------------------------

KAGGLE_HOST = REPO / "profiles" / "kaggle-t4x2-cu128.host.json"


def _host(**platform: str) -> HostSnapshot:
    host = read_snapshot(KAGGLE_HOST)
    return attrs.evolve(host, platform=attrs.evolve(host.platform, **platform))


def test_target_from_host_describes_the_kaggle_host() -> None:
    target = target_from_host(read_snapshot(KAGGLE_HOST))
    assert target == Target(
        python="3.12.13", abi="cp312", implementation="cpython", os="linux", glibc="2.35"
    )


@pytest.mark.parametrize(
    ("os_name", "expected"),
    [
        ("linux", "linux"),
        ("darwin", "darwin"),
        ("win32", "windows"),
        ("windows", "windows"),
        ("freebsd14", "linux"),
    ],
)
def test_target_from_host_maps_the_os(os_name: str, expected: str) -> None:
    assert target_from_host(_host(os=os_name)).os == expected


def test_target_from_host_without_an_abi_takes_the_implementations_default() -> None:
    host = read_snapshot(KAGGLE_HOST)
    cpython = attrs.evolve(host, python=attrs.evolve(host.python, abi=None))
    assert target_from_host(cpython).abi == "cp312"
    pypy = attrs.evolve(cpython, python=attrs.evolve(cpython.python, implementation="pypy"))
    assert (target_from_host(pypy).implementation, target_from_host(pypy).abi) == (
        "pypy",
        "pypy312",
    )
