"""``-q/--quiet`` and ``-v/--verbose`` on every command: added to every subcommand's parser
after the groups registered theirs, and applied to :mod:`kvenv.cli._io` before a command runs.

``--quiet`` drops informational ``note:`` lines and the progress display; the command's result
(stdout), warnings and errors are unchanged, and so is every exit code. ``--verbose`` adds
``kvenv: ...`` lines on stderr saying what was resolved and where from (the profile file, the
runtime root, the cache). Neither changes ``--json`` output.
"""

from __future__ import annotations

import argparse

import kvenv.cli._io as _io

TYPE_CHECKING = False  # typing is not imported at run time (start-up, issue 13)
if TYPE_CHECKING:
    from typing import Any


def add_flags(sub: Any) -> None:
    """Give every parser under the subparsers action ``sub`` (nested verbs included) the two
    flags, once."""
    for parser in sub.choices.values():
        if "--quiet" not in parser._option_string_actions:
            group = parser.add_mutually_exclusive_group()
            group.add_argument(
                "-q",
                "--quiet",
                dest="verbosity",
                action="store_const",
                const=-1,
                default=0,
                help="no notes and no progress (results, warnings and errors still print)",
            )
            group.add_argument(
                "-v",
                "--verbose",
                dest="verbosity",
                action="store_const",
                const=1,
                help="also say what was resolved and where from (profile, root, cache)",
            )
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                add_flags(action)


def set_level(args: argparse.Namespace) -> None:
    """Set the output level for the command about to run."""
    _io.VERBOSITY = int(getattr(args, "verbosity", 0) or 0)
