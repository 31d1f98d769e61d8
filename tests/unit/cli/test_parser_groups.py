"""A command's parser registers its own group alone (start-up time): the map that says which
group registers which command must match what the groups register."""

from __future__ import annotations

import argparse
import importlib

import pytest

from kvenv.cli import _GROUP_OF, _GROUPS, _commands, build_parser


def _registered() -> dict[str, str]:
    """Each command, by the group whose ``register`` adds it."""
    out = {}
    for group in _GROUPS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command")
        importlib.import_module(group).register(sub)
        for command in sub.choices:
            assert command not in out, f"{command} registered by {out[command]} and {group}"
            out[command] = group
    return out


def test_every_command_is_mapped_to_the_group_that_registers_it() -> None:
    registered = _registered()
    last = _GROUPS[-1]  # completion: it describes every command, so it gets every group
    assert {c: g for c, g in registered.items() if g != last} == _GROUP_OF


@pytest.mark.parametrize("command", sorted(_GROUP_OF))
def test_a_commands_parser_knows_it(command: str) -> None:
    commands = _commands(build_parser(command))
    assert command in commands
    assert set(commands) == {c for c, g in _GROUP_OF.items() if g == _GROUP_OF[command]}


@pytest.mark.parametrize("command", [None, "completion", "no-such-command"])
def test_help_completion_and_unknown_commands_get_every_group(command: str | None) -> None:
    assert set(_commands(build_parser(command))) == set(_registered())
