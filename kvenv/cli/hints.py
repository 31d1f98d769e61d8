"""Fix commands as they are printed: a hint's ``{kvenv VERB ARGS}`` completed with the profile,
runtime root, cache and host interpreter of the invocation that failed, and only with the
options ``VERB`` accepts, so every command kvenv tells the user to run can be run as printed."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

TYPE_CHECKING = False  # typing is not imported at run time (start-up, issue 13)
if TYPE_CHECKING:
    from typing import Any

# The invocation's options a fix command repeats when its verb accepts them.
_CARRIED = ("root", "cache", "python")
# How kvenv is run (``kvenv``; a single-file bundle: ``python FILE``) and the profile that
# goes without saying there (a single-file bundle's own): see run_as().
_PROGRAM: list[str] = ["kvenv"]
_IMPLIED: list[str] = []


def run_as(program: Sequence[str], profile: str | None = None) -> tuple[list[str], str | None]:
    """Print fix commands as ``program VERB …`` (a single-file bundle: ``python FILE``),
    leaving out ``profile`` (the bundle's own), until called again; what it was before (to
    pass back when done)."""
    before = (list(_PROGRAM), _IMPLIED[0] if _IMPLIED else None)
    _PROGRAM[:] = list(program)
    _IMPLIED[:] = [profile] if profile else []
    return before


def _subparser(parser: argparse.ArgumentParser, words: Sequence[str]) -> tuple[Any, int]:
    """The parser of the (possibly nested: ``cache prune``) command ``words`` start with, and
    how many words name it; ``(None, 1)`` for a verb the parser does not know."""
    current: argparse.ArgumentParser | None = parser
    used = 0
    while current is not None and used < len(words):
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or words[used] not in actions[0].choices:
            break
        current = actions[0].choices[words[used]]
        used += 1
    return (current, used) if used else (None, 1)


def completer(
    parser_for: Callable[[str], argparse.ArgumentParser],
) -> Callable[[argparse.Namespace, Sequence[str]], str]:
    """The function that writes ``words`` (``("apply", "--repair")``) as the full command line
    for an invocation's ``args``: ``kvenv apply PROFILE --repair --root DIR …``."""

    def complete(args: argparse.Namespace, words: Sequence[str]) -> str:
        import shlex

        found, used = _subparser(parser_for(words[0]), words)
        argv = [*_PROGRAM, *words[:used]]
        rest = list(words[used:])
        if found is None:
            return shlex.join(argv + rest)
        dests = {a.dest: a for a in found._actions}
        profile = getattr(args, "profile", None)
        implied = profile in _IMPLIED
        if profile and not implied and "profile" in dests and not dests["profile"].option_strings:
            argv.append(profile)
        argv += rest
        for name in _CARRIED:
            value = getattr(args, name, None)
            flag = f"--{name}"
            if value and flag in found._option_string_actions and flag not in rest:
                argv += [flag, value]
        return shlex.join(argv)

    return complete


def fix_command(args: argparse.Namespace, *words: str) -> str:
    """``words`` as the command line to print for ``args``' invocation (see :func:`completer`;
    the CLI binds it to ``args`` before running a command)."""
    bound: Callable[[argparse.Namespace, Sequence[str]], str] | None = getattr(
        args, "fix_command", None
    )
    if bound is None:
        import shlex

        return shlex.join(["kvenv", *words])
    return bound(args, words)


def fill_fixes(args: argparse.Namespace, text: str) -> str:
    """``text`` (a finding's fix) with its ``{kvenv VERB ARGS}`` completed for ``args``."""
    from kvenv.errors import fill_commands

    return fill_commands(text, lambda words: fix_command(args, *words))
