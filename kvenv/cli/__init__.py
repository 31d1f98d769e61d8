"""The command line: the only part of kvenv that prints, and the one place errors become exit codes.

Each command group lives in its own module (``kvenv.cli.<group>``) exposing ``register(sub)``.
Those modules import nothing heavy at module level, so ``kvenv --help`` stays fast; the work
happens in functions that import what they need.
"""

from __future__ import annotations

import argparse
import importlib
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
    from collections.abc import Sequence
    from typing import NoReturn

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
    "kvenv.cli.apply",
    "kvenv.cli.host",
    "kvenv.cli.runtime",
    "kvenv.cli.bundle",
    "kvenv.cli.cache",
)


def exit_code_for(error: BaseException) -> int:
    """The one place that maps an error to an exit code."""
    from kvenv.errors import CheckFailed, ConflictError

    if isinstance(error, CheckFailed):
        return EXIT_CHECK_FAILED
    if isinstance(error, ConflictError):
        return EXIT_CONFLICT
    return EXIT_BAD_INPUT


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"kvenv: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; given the ``command`` about to run, only the groups up to the one that
    registers it are imported (CLI startup time). ``--help`` and unknown commands load all."""
    parser = _Parser(
        prog="kvenv",
        description="Pinned native wheels and verified overlays on hosts whose torch/CUDA "
        "must not be touched.",
    )
    parser.add_argument("--version", action="version", version=f"kvenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module_name in _GROUPS:
        module = importlib.import_module(module_name)
        module.register(sub)
        if command is not None and command in sub.choices:
            break
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. A reader that closed stdout early (``kvenv … | head
    -1``) ends the command quietly with :data:`EXIT_BROKEN_PIPE`, as a SIGPIPE'd tool would."""
    try:
        try:
            code = _run(argv)
        finally:
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


def _run(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["--version"]:
        sys.stdout.write(f"kvenv {__version__}\n")  # fast path: no parser, no command groups
        return EXIT_OK
    from kvenv.errors import KvenvError

    first = arguments[0] if arguments and not arguments[0].startswith("-") else None
    parser = build_parser(first)
    args = parser.parse_args(arguments)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        code: int = func(args)
    except KvenvError as error:
        sys.stderr.write(f"kvenv: error: {error.render()}\n")
        return exit_code_for(error)
    except BrokenPipeError:
        raise  # the reader is gone: main() ends quietly
    except OSError as error:
        where = f": {error.filename}" if error.filename else ""
        sys.stderr.write(f"kvenv: error: {error.strerror or error}{where}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("kvenv: interrupted\n")
        return EXIT_INTERRUPTED
    return code
