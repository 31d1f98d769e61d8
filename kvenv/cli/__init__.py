"""The command line: the only part of kvenv that prints, and the one place errors become exit codes.

Each command group lives in its own module (``kvenv.cli.<group>``) exposing ``register(sub)``.
Those modules import nothing heavy at module level, so ``kvenv --help`` stays fast; the work
happens in functions that import what they need.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import re
import sys

from kvenv import __version__
from kvenv.cli.exitcodes import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_CHECK_FAILED,
    EXIT_CONFLICT,
    EXIT_INTERRUPTED,
    EXIT_OK,
)

# ``typing`` and ``kvenv.errors`` (attrs) are imported only when needed, so ``kvenv --version``
# imports almost nothing (see benchmarks/cli_startup.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, NoReturn

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_CHECK_FAILED",
    "EXIT_CONFLICT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "build_parser",
    "exit_code_for",
    "main",
]

_GROUPS: tuple[str, ...] = (
    "kvenv.cli.profiles",
    "kvenv.cli.lock",
    "kvenv.cli.edit",
    "kvenv.cli.pin",
    "kvenv.cli.lockview",
    "kvenv.cli.apply",
    "kvenv.cli.host",
    "kvenv.cli.runtime",
    "kvenv.cli.bundle",
    "kvenv.cli.cache",
    "kvenv.cli.cluster",
    "kvenv.cli.run",
    "kvenv.cli.generations",
    "kvenv.cli.completion",
)
# The group that registers each command, so that a command's parser imports and registers that
# group alone (start-up time). `completion`, the last group, describes every command: it gets
# them all, as do `--help` and a command not named here. Checked against the groups themselves
# by tests/unit/cli/test_parser_groups.py.
_GROUP_OF: dict[str, str] = {
    **dict.fromkeys(("profiles", "show", "validate", "schema"), "kvenv.cli.profiles"),
    **dict.fromkeys(("lock", "diff"), "kvenv.cli.lock"),
    **dict.fromkeys(("add", "remove"), "kvenv.cli.edit"),
    "pin": "kvenv.cli.pin",
    **dict.fromkeys(("why", "tree", "export"), "kvenv.cli.lockview"),
    **dict.fromkeys(
        ("plan", "apply", "bootstrap", "activate", "env", "status", "verify", "reset"),
        "kvenv.cli.apply",
    ),
    **dict.fromkeys(
        ("fingerprint", "init", "doctor", "verify-gpus", "verify-wheel", "stage-wheel"),
        "kvenv.cli.host",
    ),
    **dict.fromkeys(("inspect-shards", "serve"), "kvenv.cli.runtime"),
    "bundle": "kvenv.cli.bundle",
    "cache": "kvenv.cli.cache",
    "cluster": "kvenv.cli.cluster",
    **dict.fromkeys(("run", "shell", "deactivate"), "kvenv.cli.run"),
    **dict.fromkeys(("list", "generations", "rollback"), "kvenv.cli.generations"),
}


def exit_code_for(error: BaseException) -> int:
    """The one place that maps an error to an exit code."""
    from kvenv.errors import CheckFailed, ConflictError

    if isinstance(error, CheckFailed):
        return EXIT_CHECK_FAILED
    if isinstance(error, ConflictError):
        return EXIT_CONFLICT
    return EXIT_BAD_INPUT


class _CommandLineError(Exception):
    """A command line argparse refused: its message, the usage of the parser that refused it,
    and a "did you mean" hint (reported by :func:`_run`, as text or, with ``--json``, JSON)."""

    def __init__(self, message: str, usage: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.usage, self.hint = message, usage, hint


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Raise instead of printing and exiting, so the one error path reports it; an invalid
        choice (a command, a verb, a ``--shell``) gets the closest valid one as a hint
        (argparse suggests only from Python 3.14)."""
        from kvenv.cli._io import closest

        hint = None
        found = re.search(r"invalid choice: (.+?) \(choose from (.+)\)$", message)
        if found:
            given = found.group(1).strip("'\"")
            choices = [c.strip().strip("'\"") for c in found.group(2).split(",")]
            hint = closest(given, choices)
        raise _CommandLineError(message, self.format_usage(), hint)


def _unrecognized(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> None:
    """Refuse arguments no parser took, suggesting the closest flag of the command they were
    given to (the innermost subcommand the namespace names)."""
    from kvenv.cli._io import closest

    command = parser
    while True:
        subs = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs and subs[0].dest else None
        if not subs or chosen not in subs[0].choices:
            break
        command = subs[0].choices[chosen]
    options = [o for o in command._option_string_actions if o.startswith("--")]
    hints = []
    for token in extra:
        if token.startswith("-"):
            suggestion = closest(token.split("=", 1)[0], options)
            if suggestion:
                hints.append(suggestion)
    raise _CommandLineError(
        f"unrecognized arguments: {' '.join(extra)}",
        command.format_usage(),
        "; ".join(hints) or None,
    )


def _wants_json(arguments: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (``--json``, or ``--shell json``) before any
    ``--``: then an error is a JSON object on stdout too."""
    words = list(arguments)
    if "--" in words:
        words = words[: words.index("--")]
    pairs = zip(words, [*words[1:], ""], strict=True)
    return "--json" in words or "--shell=json" in words or ("--shell", "json") in pairs


# Options every command takes (``--json``: most of them) that may also come before the command:
# ``kvenv -q status`` is ``kvenv status -q``.
GLOBAL_OPTIONS = frozenset({"-q", "--quiet", "-v", "--verbose", "--json"})


def _leading_globals(arguments: Sequence[str]) -> list[str]:
    """The :data:`GLOBAL_OPTIONS` that open the command line, before the command."""
    leading: list[str] = []
    for word in arguments:
        if word not in GLOBAL_OPTIONS:
            break
        leading.append(word)
    return leading


def _after_command(
    parser: argparse.ArgumentParser, rest: Sequence[str], leading: Sequence[str]
) -> list[str]:
    """``rest`` (the command line from the command on) with the ``leading`` global options put
    right after the command and its verb (``cache verify``), where the command's own parser
    takes them, and before anything positional or after ``--`` that is not an option."""
    at = 1
    command = _commands(parser).get(rest[0])
    verbs = _commands(command) if command is not None else {}
    if verbs and len(rest) > 1 and rest[1] in verbs:
        at = 2
    return [*rest[:at], *leading, *rest[at:]]


def _describe(sub: Any) -> None:
    """Give every command (and nested verb) without a description its one-line help as one,
    so ``kvenv COMMAND --help`` always says what the command does."""
    for choice in sub._choices_actions:
        command = sub.choices.get(choice.dest)
        if command is None:
            continue
        if command.description is None and choice.help:
            command.description = choice.help[0].upper() + choice.help[1:] + "."
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _describe(action)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; given the ``command`` about to run, only the group that registers it
    is imported (CLI startup time). ``--help``, ``completion`` and unknown commands load all."""
    parser = _Parser(
        prog="kvenv",
        description="Pinned native wheels and verified overlays on hosts whose torch/CUDA "
        "must not be touched.",
        epilog="-q/--quiet, -v/--verbose and --json may come before the command or after it "
        "(kvenv -q status, kvenv status -q).",
    )
    parser.add_argument("--version", action="version", version=f"kvenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    group = _GROUP_OF.get(command) if command is not None else None
    for module_name in _GROUPS if group is None else (group,):
        importlib.import_module(module_name).register(sub)
    _describe(sub)
    from kvenv.cli.verbosity import add_flags

    add_flags(sub)  # -q/--quiet, -v/--verbose on every command
    return parser


def _commands(parser: argparse.ArgumentParser) -> Mapping[str, Any]:
    """The commands ``parser`` registered (by name)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


SWITCH_INTERVAL = 0.0005  # seconds: how long a thread may hold the GIL while others wait


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. A reader that closed stdout early (``kvenv … | head
    -1``) ends the command quietly with :data:`EXIT_BROKEN_PIPE`, as a SIGPIPE'd tool would."""
    collecting = gc.isenabled()
    # A command is one short process: the cyclic garbage collector, run every few hundred
    # containers allocated, rescans the same live objects (the modules and classes imported,
    # the JSON of store markers and seals, a link plan) again and again: ~4-10% of a warm
    # apply, holding the GIL while the linking threads wait (issue 13). Reference counting
    # still frees everything but cycles, which these commands make few of; a long-running
    # command (serve) turns it back on.
    gc.disable()
    # A cold apply runs a few threads that hand the GIL back and forth around short system
    # calls and inflates (downloads, unpacks): a thread waking from one waits for the switch
    # interval when another holds the GIL. 0.5 ms instead of 5 ms: a cold apply from the index
    # ~8% faster here (issue 25, docs/performance.md).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        try:
            code = _run(argv)
        finally:
            sys.setswitchinterval(interval)
            if collecting:
                gc.enable()  # main() may run inside a longer process (tests, notebooks)
            if sys.stdout is not None:
                sys.stdout.flush()  # here, not at interpreter exit, where it could not be caught
    except BrokenPipeError:
        return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """Point stdout at the null device, so the interpreter's flush at exit cannot complain."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file descriptor (captured in tests)
        pass
    return EXIT_BROKEN_PIPE


def _keep_records(records: Sequence[Any]) -> None:
    """Write what a command that succeeded keeps for the next one. Best effort: a record that
    cannot be written is only a miss next time, never a failure of a command that succeeded."""
    from kvenv.errors import KvenvError

    for record in records:
        try:
            record()
        except (OSError, KvenvError):
            continue


def _run(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:
        sys.stdout.write(f"kvenv {__version__}\n")  # fast path: no parser, no command groups
        return EXIT_OK
    from kvenv.errors import KvenvError

    leading = _leading_globals(arguments)
    rest = arguments[len(leading) :]
    first = rest[0] if rest and not rest[0].startswith("-") else None
    parser = build_parser(first)
    if leading and first is not None:
        arguments = _after_command(parser, rest, leading)
    as_json = _wants_json(arguments)
    try:
        args, extra = parser.parse_known_args(arguments)
        if extra:
            _unrecognized(parser, args, extra)
    except _CommandLineError as refused:
        from kvenv.cli._io import report_error

        hint = f"did you mean {refused.hint}?" if refused.hint else None
        return report_error(
            "UsageError",
            EXIT_BAD_INPUT,
            refused.message,
            hint=hint,
            as_json=as_json,
            usage=refused.usage,
        )
    as_json = bool(getattr(args, "json", False)) or getattr(args, "shell", None) == "json"
    from kvenv.cli.verbosity import set_level

    set_level(args)  # --quiet / --verbose
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    from kvenv.cli.hints import completer, fix_command

    def parser_for(command: str) -> argparse.ArgumentParser:
        """The parser that parsed this command line when it knows ``command`` (a hint
        naming a command of the same group: not built twice), else one that does."""
        return parser if command in _commands(parser) else build_parser(command)

    args.fix_command = completer(parser_for)  # hints print runnable commands
    # Records a command keeps for the next one (a profile's facts): written only once it
    # succeeded, so a refused command leaves nothing behind.
    args.on_success = []
    if getattr(args, "keeps_gc", False):
        gc.enable()  # a long-running command (serve): see main()
    try:
        code: int = func(args)
        if code == EXIT_OK:
            _keep_records(args.on_success)
    except KvenvError as error:
        error.complete_commands(lambda words: fix_command(args, *words))
        from kvenv.cli._io import report_kvenv_error

        return report_kvenv_error(error, exit_code_for(error), as_json=as_json)
    except BrokenPipeError:
        raise  # the reader is gone: main() ends quietly
    except OSError as error:
        from kvenv.cli._io import report_error

        where = f": {error.filename}" if error.filename else ""
        message = f"{error.strerror or error}{where}"
        return report_error("OSError", EXIT_BAD_INPUT, message, as_json=as_json)
    except KeyboardInterrupt:
        from kvenv.cli._io import report_error

        return report_error("Interrupted", EXIT_INTERRUPTED, "interrupted", as_json=as_json)
    return code
