"""Fault injection for kvenv's own tests: SIGKILL this process at a named point of an apply
when ``$KVENV_TEST_KILL_AT`` names it (the hardening suite's kill campaign). Inert unless that
variable is set. Standard library only: the full apply and its recall share the points."""

from __future__ import annotations

import os

KILL_ENV = "KVENV_TEST_KILL_AT"


def kill_point(point: str) -> None:
    """SIGKILL this process when ``$KVENV_TEST_KILL_AT`` is ``point``."""
    if os.environ.get(KILL_ENV) == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
