"""The target environment of a profile: the machine an overlay is *for*, as marker values and
wheel tags. Pure: nothing of the machine running kvenv leaks in.

``TargetEnv.from_profile_target(profile.target)`` gives:

- :meth:`TargetEnv.markers` — a complete PEP 508 marker environment (``python_version``,
  ``python_full_version``, ``implementation_name``, ``implementation_version``,
  ``platform_python_implementation``, ``sys_platform``, ``platform_machine``,
  ``platform_system``, ``os_name``; ``platform_release`` and ``platform_version`` are unknown
  for a target and are the empty string), to be evaluated with
  :meth:`packaging.markers.Marker.evaluate_prepared` so no running-machine value fills a gap;
- :meth:`TargetEnv.tags` — the ordered wheel tags (most preferred first) from
  :mod:`packaging.tags` for the target's Python, ABI and platforms. On Linux with a ``glibc``
  the platforms are every compatible ``manylinux_2_N`` level from the target's glibc down
  (with the legacy ``manylinux2014``/``manylinux2010``/``manylinux1`` aliases), then
  ``linux_<machine>``. An explicit ``target.platforms`` list is used as given.

:func:`target_from_host` is the one mapping from a host snapshot to a profile target.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Literal

import attrs
from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion

from kvenv.errors import InputError, Problem
from kvenv.model.fields import DottedVersion, NonEmpty, PythonVersion
from kvenv.model.profile import PURE_ABI, Target
from kvenv.model.snapshot import HostSnapshot

_SYS_PLATFORM = {"linux": "linux", "darwin": "darwin", "windows": "win32"}
_PLATFORM_SYSTEM = {"linux": "Linux", "darwin": "Darwin", "windows": "Windows"}
_OS_NAME = {"linux": "posix", "darwin": "posix", "windows": "nt"}
_IMPL_SHORT = {"cpython": "cp", "pypy": "pp"}
_IMPL_PLATFORM = {"cpython": "CPython", "pypy": "PyPy"}
_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
_WINDOWS_ARCH = {"x86_64": "win_amd64", "amd64": "win_amd64", "arm64": "win_arm64", "x86": "win32"}


def manylinux_platforms(glibc: tuple[int, int], machine: str) -> list[str]:
    """Every manylinux platform tag a ``glibc`` of that version runs, newest first."""
    major, minor = glibc
    if major != 2:
        return []
    lowest = 5 if machine in ("x86_64", "i686") else 17
    out: list[str] = []
    for level in range(minor, lowest - 1, -1):
        out.append(f"manylinux_2_{level}_{machine}")
        legacy = _LEGACY_MANYLINUX.get((2, level))
        if legacy is not None:
            out.append(f"{legacy}_{machine}")
    return out


@attrs.frozen
class TargetEnv:
    """A target Python on a target platform. Build with :meth:`from_profile_target`."""

    python_full_version: str
    implementation: str
    abi: str
    os: str
    machine: str
    platforms: tuple[str, ...]

    @classmethod
    def from_profile_target(cls, target: Target, *, file: str | None = None) -> TargetEnv:
        """The target environment of a profile's ``[target]`` table."""
        parts = target.python.split(".")
        full = target.python if len(parts) == 3 else f"{target.python}.0"
        platforms = tuple(str(p) for p in target.platforms or _default_platforms(target, file))
        return cls(
            python_full_version=full,
            implementation=target.implementation,
            abi=target.abi,
            os=target.os,
            machine=target.machine,
            platforms=platforms,
        )

    @property
    def pure(self) -> bool:
        """A pure-Python target: ``*-none-any`` wheels, ``python`` is the minimum version."""
        return self.abi == PURE_ABI

    @property
    def python_version(self) -> str:
        return ".".join(self.python_full_version.split(".")[:2])

    @property
    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python_version.split(".")
        return int(major), int(minor)

    @cached_property
    def _markers(self) -> dict[str, str | frozenset[str]]:
        return {
            "implementation_name": self.implementation,
            "implementation_version": self.python_full_version,
            "os_name": _OS_NAME[self.os],
            "platform_machine": self.machine,
            "platform_python_implementation": _IMPL_PLATFORM.get(
                self.implementation, self.implementation
            ),
            "platform_release": "",
            "platform_system": _PLATFORM_SYSTEM[self.os],
            "platform_version": "",
            "python_full_version": self.python_full_version,
            "python_version": self.python_version,
            "sys_platform": _SYS_PLATFORM[self.os],
        }

    def markers(self, extras: frozenset[str] = frozenset()) -> dict[str, str | frozenset[str]]:
        """The complete marker environment, with ``extra`` set to ``extras`` (a set of names)
        and the lock-file keys ``extras`` and ``dependency_groups`` empty."""
        env = dict(self._markers)
        env["extra"] = extras
        env["extras"] = frozenset()
        env["dependency_groups"] = frozenset()
        return env

    def evaluate(self, marker: Marker | None, extras: frozenset[str] = frozenset()) -> bool:
        """Whether ``marker`` holds on the target (a marker that cannot be evaluated does not)."""
        if marker is None:
            return True
        try:
            return marker.evaluate_prepared(self.markers(extras))
        except (UndefinedComparison, UndefinedEnvironmentName, InvalidMarker):
            return False

    @cached_property
    def _tags(self) -> tuple[Tag, ...]:
        version = self.python_tuple
        if self.pure:
            pure = compatible_tags(version, None, ["any"])
            return tuple(dict.fromkeys(t for t in pure if t.abi == "none"))
        if self.implementation == "cpython":
            interpreter = f"cp{version[0]}{version[1]}"
            tags = list(cpython_tags(version, [self.abi], self.platforms))
        else:
            interpreter = f"{_IMPL_SHORT.get(self.implementation, 'py')}{version[0]}{version[1]}"
            tags = list(generic_tags(interpreter, [self.abi], self.platforms))
        tags.extend(compatible_tags(version, interpreter, self.platforms))
        return tuple(dict.fromkeys(tags))

    def tags(self) -> list[Tag]:
        """The wheel tags the target accepts, most preferred first."""
        return list(self._tags)

    @cached_property
    def _priority(self) -> dict[Tag, int]:
        return {tag: index for index, tag in enumerate(self._tags)}

    def wheel_rank(self, filename: str) -> int | None:
        """The rank of a wheel for the target (0 is best), or None if it does not install there."""
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, InvalidVersion):
            return None
        ranks = [self._priority[tag] for tag in tags if tag in self._priority]
        return min(ranks) if ranks else None

    def supports_wheel(self, filename: str) -> bool:
        return self.wheel_rank(filename) is not None

    def environment_marker(self) -> str:
        """The PEP 751 ``environments`` entry describing this target."""
        env = self._markers
        if self.pure:
            return (
                f'implementation_name == "{env["implementation_name"]}" '
                f'and python_full_version >= "{self.python_full_version}"'
            )
        return (
            f'sys_platform == "{env["sys_platform"]}" '
            f'and platform_machine == "{env["platform_machine"]}" '
            f'and implementation_name == "{env["implementation_name"]}" '
            f'and python_version == "{env["python_version"]}"'
        )

    def requires_python(self) -> str:
        """The PEP 751 ``requires-python`` for this target: its exact ``major.minor``."""
        if self.pure:
            return f">={self.python_full_version}"
        return f"=={self.python_version}.*"

    def describe(self) -> str:
        if self.pure:
            return f"{self.implementation} >= {self.python_full_version} (pure Python)"
        first = self.platforms[0] if self.platforms else "any"
        return f"{self.implementation} {self.python_full_version} ({self.abi}, {first})"


def _default_platforms(target: Target, file: str | None) -> Sequence[str]:
    machine = target.machine
    if target.pure:
        return ["any"]
    if target.os == "linux":
        out: list[str] = []
        if target.glibc:
            numbers = [int(n) for n in target.glibc.split(".")]
            glibc = (numbers[0], numbers[1] if len(numbers) > 1 else 0)
            out.extend(manylinux_platforms(glibc, machine))
        out.append(f"linux_{machine}")
        return out
    if target.os == "windows":
        plat = _WINDOWS_ARCH.get(machine.lower())
        if plat:
            return [plat]
    raise InputError(
        f"cannot derive wheel platforms for a {target.os} {machine} target",
        problems=[
            Problem(
                "no wheel platform tags for this target",
                file=file,
                path="$.target.platforms",
                fix='list them, e.g. platforms = ["macosx_14_0_arm64"]',
            )
        ],
    )


def target_from_host(host: HostSnapshot) -> Target:
    """A profile target equal to the host (its Python, ABI, OS, machine and glibc; no GPU).

    The OS is ``windows`` for ``win32``/``windows``, ``darwin`` for ``darwin``, else ``linux``;
    a host that reports no ABI gets its implementation's default (``cp312``, ``pypy312``).
    """
    version = ".".join(host.python.version.split(".")[:3])
    short = "".join(version.split(".")[:2])
    implementation: Literal["cpython", "pypy"] = (
        "pypy" if host.python.implementation == "pypy" else "cpython"
    )
    abi = host.python.abi or (f"cp{short}" if implementation == "cpython" else f"pypy{short}")
    os_name: Literal["linux", "darwin", "windows"] = "linux"
    if host.platform.os == "darwin":
        os_name = "darwin"
    elif host.platform.os in ("win32", "windows"):
        os_name = "windows"
    glibc = host.platform.libc_version if host.platform.libc == "glibc" else None
    return Target(
        python=PythonVersion(version),
        abi=NonEmpty(abi),
        implementation=implementation,
        os=os_name,
        machine=NonEmpty(host.platform.machine),
        glibc=DottedVersion(glibc) if glibc else None,
    )
