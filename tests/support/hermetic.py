"""A pytest plugin that keeps the test session out of the user's home and kvenv settings.

At configure time, before any test or fixture runs, it points ``HOME``, the XDG base
directories (``XDG_CONFIG_HOME``, ``XDG_CACHE_HOME``, ``XDG_DATA_HOME``, ``XDG_STATE_HOME``,
``XDG_RUNTIME_DIR``) and Ray's temporary directory (``RAY_TMPDIR``; Ray's ``~/.ray`` follows
``HOME``) at one fresh temporary directory, removed when the session ends, and clears every
``KVENV_*`` variable kvenv reads (a user's ``KVENV_ROOT`` or ``KVENV_CACHE_DIR`` must never
decide, or receive, a test). Every process a test starts inherits that environment, so a test
that builds a child's environment from scratch but keeps ``HOME`` still writes into the
temporary home. An autouse fixture clears kvenv's ``KVENV_*`` variables again before each test
(one that set them without ``monkeypatch`` cannot leak into the next).

The opt-in suites' own knobs stay: ``KVENV_E2E_*``, ``KVENV_RUNTIME_*``, ``KVENV_KILL_*`` and
``KVENV_TEST_*`` of the harness (see docs/testing.md). The two explicit download caches of the
opt-in suites default to the *real* home: ``KVENV_E2E_CACHE`` (``~/.cache/kvenv-e2e``) and
``KVENV_RUNTIME_CACHE`` (``~/.cache/kvenv-runtime``) are set from it when unset, so that a big
download is kept between runs as documented; :func:`real_home` gives the real home to a test
that needs something installed there (a pyenv interpreter).

At session start it snapshots the real home (the names at its top level and under
``.cache``, ``.config``, ``.local/share`` and ``.local/state``; every file and directory of
kvenv's own trees there and of ``~/.ray``, with size and mtime); at session end it compares, and
any difference fails the session (exit status 1), naming each path. The opt-in caches above are
left out of the comparison. ``KVENV_TEST_USER_CACHE=1`` keeps the environment's home and XDG
directories (an explicit opt-out; the check then does not run). ``KVENV_TEST_HOME_GUARD=0``
keeps the temporary home but skips the final check, for a machine where something else (the
user's own ``kvenv lock`` in another terminal, another checkout's older test suite) writes
kvenv's cache in the real home while the tests run: the check cannot tell who wrote.

The user's pip and uv configuration files (``~/.config/pip/pip.conf``, ``~/.pip/pip.conf``,
``~/.config/uv/uv.toml``) are copied into the temporary home, so pip and uv choose wheels as
they did before (the find-links or index that gives ``torch==2.13.0+cpu`` to the opt-in
suites); nothing else of the real home is read.
"""

from __future__ import annotations

import os
import pwd
import shutil
import site
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

# The harness's own variables (read by tests, not by kvenv): kept for the whole session.
HARNESS_PREFIXES = (
    "KVENV_E2E_",
    "KVENV_RUNTIME_",
    "KVENV_KILL_",
    "KVENV_TEST_USER_CACHE",
    "KVENV_TEST_HOME_GUARD",
)
# Directories under the real home that the check lists one level deep (names only: another
# program of the user may touch a file there while the tests run, but the tests must add none).
LISTED = ("", ".cache", ".config", ".local", ".local/share", ".local/state")
# Trees under the real home that the check walks whole (size and mtime of every entry).
WALKED = (
    ".cache/kvenv",
    ".config/kvenv",
    ".local/share/kvenv",
    ".local/state/kvenv",
    ".ray",
)
# The opt-in suites' explicit download caches (docs/testing.md), not compared.
OPT_IN_CACHES = (".cache/kvenv-e2e", ".cache/kvenv-runtime")
# Variables that may name an opt-in suite's directory (its cache or work directory).
OPT_IN_PATHS = (
    "KVENV_E2E_CACHE",
    "KVENV_E2E_WORKDIR",
    "KVENV_RUNTIME_CACHE",
    "KVENV_RUNTIME_WORKDIR",
)
XDG = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
    "XDG_STATE_HOME": ".local/state",
}
SNAPSHOT_KEY = pytest.StashKey[dict[str, str]]()

_REAL_HOME: list[Path] = []
_MADE: list[str] = []


def _home_of(environ: Mapping[str, str]) -> Path:
    given = environ.get("HOME")
    if given:
        return Path(given)
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def real_home() -> Path:
    """The home directory of the user running the tests (not the session's temporary one)."""
    return _REAL_HOME[0] if _REAL_HOME else _home_of(os.environ)


def is_harness_variable(name: str) -> bool:
    return name.startswith(HARNESS_PREFIXES)


def kvenv_variables(environ: Mapping[str, str]) -> list[str]:
    """kvenv's own ``KVENV_*`` variables in ``environ`` (the harness's knobs left out)."""
    return sorted(k for k in environ if k.startswith("KVENV_") and not is_harness_variable(k))


def snapshot(home: Path) -> dict[str, str]:
    """What the check compares: listed names one level deep, walked trees whole."""
    skipped = {str(home / rel) for rel in OPT_IN_CACHES}
    for name in OPT_IN_PATHS:  # an opt-in suite's directory given inside the home
        given = os.environ.get(name)
        if given:
            path = Path(os.path.abspath(Path(given).expanduser()))
            skipped.update(str(p) for p in (path, *path.parents))
    found: dict[str, str] = {}
    for rel in LISTED:
        base = home / rel if rel else home
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            path = str(base / name)
            if path not in skipped:
                found[path] = "present"
    for rel in WALKED:
        top = home / rel
        if not os.path.lexists(top):
            continue
        for directory, dirs, files in os.walk(top):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                path = os.path.join(directory, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                found[path] = f"size={info.st_size} mtime={info.st_mtime_ns}"
        found[str(top)] = "present"
    return found


def differences(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One line per path that appeared, disappeared or changed."""
    lines: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            lines.append(f"{path}: written by the tests")
        elif new is None:
            lines.append(f"{path}: removed by the tests")
        else:
            lines.append(f"{path}: changed ({old} -> {new})")
    return lines


def copy_installer_config(real: Path, real_config: Path, home: Path) -> list[Path]:
    """The user's pip and uv configuration files, copied into the temporary ``home`` (read
    only, never credentials): the index or find-links they name decide what ``pip install
    torch==2.13.0`` gives the opt-in suites (the CPU build), as before the home was replaced."""
    copied: list[Path] = []
    for source, rel in (
        (real_config / "pip" / "pip.conf", ".config/pip/pip.conf"),
        (real / ".pip" / "pip.conf", ".pip/pip.conf"),
        (real_config / "uv" / "uv.toml", ".config/uv/uv.toml"),
    ):
        if source.is_file():
            target = home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied.append(target)
    return copied


def temporary_home(base: Path, real: Path | None = None) -> dict[str, str]:
    """The environment of the session's home under ``base`` (directories made; the
    installers' configuration copied from ``real``, the real home)."""
    home = base / "home"
    env = {"HOME": str(home)}
    if real is not None:
        given = os.environ.get("XDG_CONFIG_HOME")
        copy_installer_config(real, Path(given) if given else real / ".config", home)
    for name, rel in XDG.items():
        (home / rel).mkdir(parents=True, exist_ok=True)
        env[name] = str(home / rel)
    runtime = base / "run"
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    ray = base / "ray"
    ray.mkdir()
    env["RAY_TMPDIR"] = str(ray)
    return env


def pytest_configure(config: pytest.Config) -> None:
    if _REAL_HOME:
        return
    home = _home_of(os.environ)
    _REAL_HOME.append(home)
    for name in ("KVENV_E2E_CACHE", "KVENV_RUNTIME_CACHE"):
        default = home / ".cache" / ("kvenv-e2e" if "E2E" in name else "kvenv-runtime")
        os.environ.setdefault(name, str(default))
    for name in kvenv_variables(os.environ):
        del os.environ[name]
    if os.environ.get("KVENV_TEST_USER_CACHE"):  # opt out: keep the given home and XDG dirs
        return
    site.getusersitepackages()  # cached from the real home: the host guard checks that one
    base = tempfile.mkdtemp(prefix="kvenv-tests-")
    _MADE.append(base)
    os.environ.update(temporary_home(Path(base), home))


def pytest_sessionstart(session: pytest.Session) -> None:
    if _MADE and os.environ.get("KVENV_TEST_HOME_GUARD") != "0":
        session.stash[SNAPSHOT_KEY] = snapshot(real_home())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.stash.get(SNAPSHOT_KEY, None)
    if before is None:
        return
    changed = differences(before, snapshot(real_home()))
    if not changed:
        return
    shown = changed[:40] + ([f"... and {len(changed) - 40} more"] if len(changed) > 40 else [])
    message = (
        f"HOME GUARD: the test session wrote into the real home {real_home()} "
        "(tests must use the session's temporary HOME and XDG directories; a process outside "
        "this session writing there meanwhile shows here too: KVENV_TEST_HOME_GUARD=0 skips "
        "this check):\n" + "\n".join(f"  {line}" for line in shown) + "\n"
    )
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("!", "home guard", red=True, bold=True)
        reporter.write(message)
    else:
        sys.stderr.write(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_kvenv_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kvenv's ``KVENV_*`` variables cleared before every test."""
    for name in kvenv_variables(os.environ):
        monkeypatch.delenv(name)
    yield
