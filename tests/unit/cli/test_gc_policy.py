"""A command runs without the cyclic garbage collector (issue 13: it rescanned the same live
objects again and again, holding the GIL while linking threads waited); a long-running one
(``serve``) keeps it, and ``main()`` leaves the caller's collector as it found it. The same for
the GIL's switch interval (issue 25: a cold apply's threads wait less for one another)."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Iterator

import pytest

import kvenv.cli.profiles
import kvenv.cli.runtime
from kvenv.cli import SWITCH_INTERVAL, main


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """Replace ``validate`` and ``serve`` by commands that record whether the collector ran."""
    found: dict[str, bool] = {}

    def recorder(name: str) -> Callable[[argparse.Namespace], int]:
        def command(args: argparse.Namespace) -> int:
            found[name] = gc.isenabled()
            found[f"{name} interval"] = sys.getswitchinterval() == SWITCH_INTERVAL
            return 0

        return command

    monkeypatch.setattr(kvenv.cli.profiles, "cmd_validate", recorder("validate"))
    monkeypatch.setattr(kvenv.cli.runtime, "run_serve", recorder("serve"))
    yield found


@pytest.mark.parametrize("before", [True, False])
def test_a_command_runs_without_the_collector_and_restores_it(
    seen: dict[str, bool], before: bool
) -> None:
    (gc.enable if before else gc.disable)()
    try:
        assert main(["validate", "kaggle-t4x2-cu128"]) == 0
        assert seen["validate"] is False
        assert gc.isenabled() is before
    finally:
        gc.enable()


def test_serve_keeps_the_collector(seen: dict[str, bool]) -> None:
    assert main(["serve", "some-model", "--dry-run"]) == 0
    assert seen["serve"] is True
    assert gc.isenabled()


def test_a_command_runs_with_the_short_switch_interval_and_restores_it(
    seen: dict[str, bool],
) -> None:
    before = sys.getswitchinterval()
    assert before != SWITCH_INTERVAL  # the interpreter's default, 5 ms
    assert main(["validate", "kaggle-t4x2-cu128"]) == 0
    assert seen["validate interval"] is True
    assert sys.getswitchinterval() == before
