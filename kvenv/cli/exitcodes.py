"""kvenv's exit codes, documented in the README and docs/: every command returns one of these
(errors are mapped to them by :func:`kvenv.cli.exit_code_for`)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check ran and did not pass
EXIT_BAD_INPUT = 2  # a command line, file or value that cannot be acted on
EXIT_CONFLICT = 3  # impossible as stated: conflict, protected package, busy root
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE = 141  # stdout closed early (`kvenv … | head -1`): 128 + SIGPIPE, quietly
