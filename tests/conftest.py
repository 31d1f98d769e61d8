"""Suite-wide plugins: the host guard proves the host Python's protected packages are never
written during a test session (see :mod:`tests.support.hostguard`); the home guard gives the
session a temporary ``HOME`` and XDG directories, clears kvenv's ``KVENV_*`` variables (for the
session and again before each test) and fails the session if anything was written into the real
home (see :mod:`tests.support.hermetic`): a record left by an earlier run, or by another test
process, must never decide a test, and no test may leave one in the user's cache."""

from __future__ import annotations

pytest_plugins = ["tests.support.hostguard", "tests.support.hermetic"]
