"""The command line after ``--``: a command (``kvenv run``) or arguments for another program
(``kvenv serve``), kept untouched instead of parsed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def split_at_double_dash(
    parser: argparse.ArgumentParser, dest: str, *, absent: list[str] | None
) -> None:
    """Make ``parser`` put everything after the first ``--`` in ``args.<dest>``, untouched
    (argparse alone would let a ``nargs="?"`` positional swallow the first word); without a
    ``--``, ``args.<dest>`` is (a copy of) ``absent``."""
    parse = parser.parse_known_args

    def parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        words = list(sys.argv[1:] if args is None else args)
        tail = None if absent is None else list(absent)
        if "--" in words:
            index = words.index("--")
            words, tail = words[:index], words[index + 1 :]
        parsed, rest = parse(words, namespace)
        setattr(parsed, dest, tail)
        return parsed, rest

    setattr(parser, "parse_known_args", parse_known_args)
