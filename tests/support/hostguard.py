"""A pytest plugin proving the host Python's protected packages were never written.

At session start it fingerprints, in every site-packages directory of the interpreter running
the tests (its prefix, ``sys.base_prefix`` and the user site), everything that belongs to a
protected package (torch, torchvision, torchaudio and the import names torch owns): the package
directories (a listing of names, sizes and mtimes), single-file modules, ``*.dist-info``
directories (their RECORD's sha256). An absent package is recorded as absent. At session end
it fingerprints again; any difference fails the session loudly, naming each path that changed.

Registered from ``tests/conftest.py`` with ``pytest_plugins``. ``fingerprint(sites)`` is plain
code, so the guard's own test runs it on a fake site directory.
"""

from __future__ import annotations

import hashlib
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PROTECTED = ("torch", "torchvision", "torchaudio")
IMPORT_NAMES = ("torch", "torchvision", "torchaudio", "functorch", "torchgen")
STASH_KEY = pytest.StashKey[dict[str, str]]()


def host_site_dirs() -> list[Path]:
    """The site-packages directories of this interpreter and of its base installation."""
    found: list[str] = list(site.getsitepackages())
    found.append(site.getusersitepackages())
    for base in (sys.prefix, sys.base_prefix):
        paths = sysconfig.get_paths(vars={"base": base, "platbase": base})
        found.extend((paths["purelib"], paths["platlib"]))
    unique: dict[str, Path] = {}
    for entry in found:
        unique.setdefault(os.path.realpath(entry), Path(entry))
    return [unique[key] for key in sorted(unique)]


def _stat(path: Path) -> str:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "absent"
    return f"mode={info.st_mode:o} size={info.st_size} mtime={info.st_mtime_ns}"


def _sha(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _tree(directory: Path) -> str:
    """Names, sizes and mtimes of every entry under a package directory."""
    digest = hashlib.sha256()
    count = 0
    for current, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = Path(current, name)
            digest.update(f"{path.relative_to(directory)}|{_stat(path)}\n".encode())
            count += 1
    return f"{_stat(directory)} entries={count} tree={digest.hexdigest()}"


def _owned(name: str) -> bool:
    stem = name.split("-", 1)[0].split(".", 1)[0].lower().replace("-", "_")
    return stem in IMPORT_NAMES


def fingerprint(sites: Iterable[Path]) -> dict[str, str]:
    """``path -> fingerprint`` of every protected entry in ``sites``.

    ``*.pth`` files are not fingerprinted: other tools may legitimately add them to a shared
    development environment while tests run, which would make the guard flaky."""
    result: dict[str, str] = {}
    for directory in sites:
        result[f"{directory}/"] = _stat(directory) if directory.is_dir() else "absent"
        for name in IMPORT_NAMES:
            for candidate in (directory / name, directory / f"{name}.py"):
                if not candidate.exists() and not candidate.is_symlink():
                    result[str(candidate)] = "absent"
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir()):
            if not _owned(entry.name):
                continue
            elif entry.name.endswith((".dist-info", ".egg-info")):
                result[str(entry)] = _stat(entry) + " RECORD=" + _sha(entry / "RECORD")
            elif entry.is_dir() and not entry.is_symlink():
                result[str(entry)] = _tree(entry)
            else:
                result[str(entry)] = _stat(entry) + " sha256=" + _sha(entry)
    return result


def differences(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One line per path whose fingerprint changed, appeared or disappeared."""
    lines: list[str] = []
    for path in sorted(set(before) | set(after)):
        old = before.get(path, "absent")
        new = after.get(path, "absent")
        if old != new and not path.endswith("/"):
            lines.append(f"{path}: {old} -> {new}")
    return lines


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[STASH_KEY] = fingerprint(host_site_dirs())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.stash.get(STASH_KEY, None)
    if before is None:
        return
    changed = differences(before, fingerprint(host_site_dirs()))
    if not changed:
        return
    message = (
        "HOST GUARD: the test session wrote the host Python's protected packages "
        f"({', '.join(PROTECTED)}):\n" + "\n".join(f"  {line}" for line in changed) + "\n"
    )
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("!", "host guard", red=True, bold=True)
        reporter.write(message)
    else:
        sys.stderr.write(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
