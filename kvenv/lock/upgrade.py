"""What ``--upgrade``, ``--upgrade-package NAME[==VERSION]`` and ``--prefer FILE`` ask of a
lock, read and checked: a ``--prefer`` line pins one version (``name==version``), each version
asked for exists on the sources, and each name is in the resolution; anything else is an
:class:`~kvenv.errors.InputError` (exit 2), never silently ignored.

Pure but for :func:`read_preferences` (it reads the ``--prefer`` files); the universe is the
resolver's, so the index is asked nothing it would not be asked anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from kvenv.errors import InputError, Problem, UsageError
from kvenv.lock.candidates import Universe


@attrs.frozen
class Asked:
    """One version (or just a name) asked for: where it was asked (a file and ``line N``, or
    the flag) so that an error names it."""

    name: NormalizedName
    version: Version | None
    file: str
    where: str

    def label(self) -> str:
        return f"{self.name}=={self.version}" if self.version is not None else str(self.name)


def parse_upgrade_package(value: str) -> Asked:
    """``--upgrade-package NAME`` or ``NAME==VERSION`` (a :class:`UsageError` otherwise)."""
    try:
        req = Requirement(value)
    except InvalidRequirement:
        req = None
    pins = [s for s in req.specifier] if req is not None else []
    exact = len(pins) == 1 and pins[0].operator == "==" and "*" not in pins[0].version
    if req is None or req.marker is not None or req.extras or req.url or (pins and not exact):
        raise UsageError(
            f"--upgrade-package {value!r}: not a name or name==version",
            hint="write --upgrade-package tqdm, or --upgrade-package tqdm==4.67.1",
        )
    version = None
    if pins:
        try:
            version = Version(pins[0].version)
        except InvalidVersion:
            raise UsageError(
                f"--upgrade-package {value!r}: {pins[0].version!r} is not a version",
                hint="write a PEP 440 version, such as 4.67.1",
            ) from None
    return Asked(canonicalize_name(req.name), version, "--upgrade-package", value)


def read_preferences(paths: Sequence[Path]) -> list[Asked]:
    """Every ``--prefer`` file's lines; a line that is not ``name==version`` (a bare name, a
    range, an option) is an error naming the file and the line."""
    from kvenv.lock.reqfile import parse_requirements

    asked: list[Asked] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"--prefer file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read --prefer file {path}: {exc}") from None
        parse_requirements(text, file=str(path))  # its own errors first (options, PEP 508)
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            req = Requirement(line)
            pins = list(req.specifier)
            version: Version | None = None
            if len(pins) == 1 and pins[0].operator in ("==", "===") and "*" not in pins[0].version:
                try:
                    version = Version(pins[0].version)
                except InvalidVersion:
                    version = None
            if version is None:
                problems.append(
                    Problem(
                        f"{line!r} does not pin one version",
                        file=str(path),
                        path=f"line {number}",
                        fix=f"write {req.name}==VERSION (to upgrade {req.name} to the newest "
                        f"that fits, use --upgrade-package {req.name})",
                    )
                )
                continue
            asked.append(Asked(canonicalize_name(req.name), version, str(path), f"line {number}"))
    if problems:
        raise InputError("invalid --prefer file", problems=problems)
    return asked


def check_versions_exist(asked: Iterable[Asked], universe: Universe) -> None:
    """Every version asked for is one the sources list (for any platform): ``tqdm==9.9.9``
    is an error naming the newest versions there are, before anything is resolved."""
    problems: list[Problem] = []
    for item in asked:
        if item.version is None:
            continue
        seen = list(universe.seen_versions(item.name))
        if any(_same(text, item.version) for text in seen):
            continue
        listed = ", ".join(_newest(seen, 5)) or "none"
        problems.append(
            Problem(
                f"{item.name} {item.version} does not exist on the sources "
                f"(newest listed: {listed})",
                file=item.file,
                path=item.where,
                fix=f"ask for a version that exists, or for just {item.name} (the newest that "
                "fits)",
            )
        )
    if problems:
        raise InputError("a version asked for does not exist", problems=problems)


def check_in_resolution(
    asked: Iterable[Asked], resolved: Iterable[str], host_used: Iterable[str]
) -> None:
    """Every name asked for is a package of the resolution (the overlay, or a host package it
    relies on); one that is not would be silently ignored."""
    names = {canonicalize_name(n) for n in resolved}
    host = {canonicalize_name(n) for n in host_used}
    problems = [
        Problem(
            f"{item.label()} names nothing in the resolution"
            + (" (the overlay keeps the host's)" if item.name in host else ""),
            file=item.file,
            path=item.where,
            fix=f"check the name, or add it first (`kvenv add {item.name}`)",
        )
        for item in asked
        if item.name not in names
    ]
    if problems:
        raise InputError("a package asked for is not in the resolution", problems=problems)


def _same(text: str, version: Version) -> bool:
    try:
        return Version(text) == version
    except InvalidVersion:
        return False


def _newest(seen: Sequence[str], count: int) -> list[str]:
    versions: list[Version] = []
    for text in seen:
        try:
            versions.append(Version(text))
        except InvalidVersion:
            continue
    return [str(v) for v in sorted(set(versions), reverse=True)[:count]]
