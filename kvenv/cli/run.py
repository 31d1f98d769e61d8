"""Using an applied environment without activating it by hand: ``run`` (one command),
``shell`` (the user's shell, activated) and ``deactivate`` (undo ``kvenv activate``).

Nothing heavy at module level; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from kvenv.cli._argv import split_at_double_dash
from kvenv.cli.exitcodes import EXIT_OK

RUN_USAGE = "kvenv run [PROFILE] [--root DIR] [--cache DIR] [--manifest PATH] -- CMD [ARGS ...]"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", nargs="?", metavar="PROFILE", help="name or .toml (default profile)")
    from kvenv.cli.options import place_options

    place_options(p)
    p.add_argument("--manifest", metavar="PATH", help="a manifest instead of the current one")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run one command in the applied environment (no shell; its exit code is kvenv's)",
        usage=RUN_USAGE,
        epilog="The command replaces kvenv's process: signals reach it and its exit status is "
        "returned. Exit 2 (nothing applied, command not found) happens before it starts.",
    )
    _common(p)
    split_at_double_dash(p, "argv", absent=None)
    p.set_defaults(func=cmd_run, argv=None)

    p = sub.add_parser("shell", help="start your shell ($SHELL, else /bin/sh) activated")
    _common(p)
    p.set_defaults(func=cmd_shell)

    p = sub.add_parser(
        "deactivate",
        help="print what undoes `kvenv activate` for a shell (same as `activate --undo`)",
    )
    p.add_argument(
        "--shell",
        choices=("bash", "zsh", "sh", "fish", "pwsh"),
        help="shell syntax (default: the shell running kvenv, else $SHELL)",
    )
    p.set_defaults(func=cmd_deactivate)


def _activated(args: argparse.Namespace) -> dict[str, str]:
    from kvenv.env.shellrender import activated_environ

    if not args.manifest:
        from kvenv.cli.apply import applied

        activation, path = applied(args)
    else:
        from kvenv.env.runenv import applied_activation

        activation, path = applied_activation(None, manifest=args.manifest)
    return activated_environ(activation, os.environ, manifest_path=str(path))


def cmd_run(args: argparse.Namespace) -> int:
    from kvenv.env.runenv import exec_command, with_host_python
    from kvenv.errors import UsageError

    if not args.argv:
        raise UsageError(
            "no command given" if args.argv is not None else "the command must follow `--`",
            hint="kvenv run [PROFILE] -- CMD [ARGS...], e.g. `kvenv run -- python -V`",
        )
    environ = _activated(args)
    argv = with_host_python(args.argv, environ)  # python: the generation's host interpreter
    exec_command(argv, environ, getattr(args, "on_success", ()))


def cmd_shell(args: argparse.Namespace) -> int:
    from kvenv.env.runenv import exec_command, user_shell

    environ = _activated(args)
    exec_command([user_shell(os.environ)], environ, getattr(args, "on_success", ()))


def cmd_deactivate(args: argparse.Namespace) -> int:
    import sys

    from kvenv.env.runenv import chosen_shell
    from kvenv.env.shellrender import render_deactivate

    sys.stdout.write(render_deactivate(chosen_shell(args.shell, os.environ)))
    return EXIT_OK
