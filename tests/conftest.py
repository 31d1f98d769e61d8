"""Suite-wide plugins: the host guard proves the host Python's protected packages are never
written during a test session (see :mod:`tests.support.hostguard`); and the session's own user
cache directory, so that no test reads or writes the user's real kvenv cache (its memo
records, store and downloads): a record left by an earlier run, or by another test process,
must never decide a test."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

pytest_plugins = ["tests.support.hostguard"]

_MADE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("KVENV_TEST_USER_CACHE"):  # opt out: keep the given XDG_CACHE_HOME
        return
    base = tempfile.mkdtemp(prefix="kvenv-tests-cache-")
    _MADE.append(base)
    os.environ["XDG_CACHE_HOME"] = base
    os.environ.pop("KVENV_CACHE_DIR", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for base in _MADE:
        shutil.rmtree(base, ignore_errors=True)
