"""Host checks: a host snapshot held against a profile's target. Pure.

Used by ``kvenv plan`` (findings before apply) and ``kvenv doctor``. Implementation, ABI, OS and
machine mismatches are always errors; the other checks are warnings unless ``strict``.
"""

from __future__ import annotations

from typing import Literal

import attrs

from kvenv.profile import Profile
from kvenv.snapshot import HostSnapshot

Status = Literal["pass", "warning", "error", "untested"]


@attrs.frozen
class Finding:
    check: str
    status: Status
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }


def _compare(
    check: str, expected: str, actual: str | None, *, hard: bool, strict: bool, fix: str
) -> Finding:
    if actual is not None and actual == expected:
        return Finding(check, "pass", f"{check}: {actual}")
    status: Status = "error" if hard or strict else "warning"
    return Finding(check, status, f"{check}: expected {expected}; found {actual or 'none'}", fix)


def check_host(profile: Profile, host: HostSnapshot, *, strict: bool = False) -> list[Finding]:
    """The findings of ``host`` against ``profile.target`` (empty when there is no target)."""
    target = profile.target
    if target is None:
        return []
    sys_platform = {"windows": "win32"}.get(target.os, target.os)
    return [
        _compare(
            "Python implementation",
            target.implementation,
            host.python.implementation,
            hard=True,
            strict=strict,
            fix="use a profile for this interpreter",
        ),
        _compare(
            "Python ABI",
            target.abi,
            host.python.abi,
            hard=True,
            strict=strict,
            fix=f"run on a {target.abi} interpreter or use a profile for this one",
        ),
        _compare(
            "operating system",
            sys_platform,
            host.platform.os,
            hard=True,
            strict=strict,
            fix="use a profile for this operating system",
        ),
        _compare(
            "machine",
            target.machine,
            host.platform.machine,
            hard=True,
            strict=strict,
            fix="use a profile for this machine architecture",
        ),
    ]
