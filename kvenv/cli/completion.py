"""``kvenv completion bash|zsh|fish|pwsh``: a shell completion script generated from kvenv's
own argparse parser, so it cannot drift from the commands and flags.

bash and zsh scripts come from ``shtab`` (static scripts: completing runs no Python, and
nothing is imported at kvenv's start-up: ``shtab`` is imported only here). ``shtab`` has no
fish or PowerShell output, so those two are written by the small walkers below over the same
parser. Profile names are completed live: every script calls the hidden, cheap
``kvenv completion --profile-names`` (names only; no profile is read).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvenv.cli.exitcodes import EXIT_OK

COMPLETION_SHELLS = ("bash", "zsh", "fish", "pwsh")
NAMES_COMMAND = "kvenv completion --profile-names 2>/dev/null"
_PROFILE_DESTS = frozenset({"profile", "profiles", "profile_or_generation"})
_DIR_FLAGS = frozenset({"--root", "--cache", "--output", "-o"})
_FILE_FLAGS = frozenset({"--manifest", "--python", "--host", "--from"})

_BASH_PREAMBLE = f"""\
_kvenv_profile_names() {{
  compgen -W "$({NAMES_COMMAND})" -- "$1"
}}
"""

_ZSH_PREAMBLE = f"""\
_kvenv_profile_names() {{
  local -a names
  names=(${{(f)"$({NAMES_COMMAND})"}})
  compadd -a names
}}
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "completion",
        help="print a completion script for a shell (commands, flags, profile names)",
        epilog="bash: `source <(kvenv completion bash)`; zsh: `kvenv completion zsh > "
        "~/.zfunc/_kvenv` with ~/.zfunc on $fpath before compinit; fish: "
        "`kvenv completion fish | source`; pwsh: "
        "`kvenv completion pwsh | Out-String | Invoke-Expression`.",
    )
    p.add_argument("shell", nargs="?", choices=COMPLETION_SHELLS, help="which shell's script")
    p.add_argument("--profile-names", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_completion, subcommands=sub)


def cmd_completion(args: argparse.Namespace) -> int:
    if args.profile_names:
        from kvenv.model.loading import iter_profiles

        names = sorted({name for name, _, _ in iter_profiles()})
        sys.stdout.write("".join(f"{n}\n" for n in names))
        return EXIT_OK
    if args.shell is None:
        from kvenv.errors import UsageError

        raise UsageError("which shell?", hint=f"kvenv completion {{{'|'.join(COMPLETION_SHELLS)}}}")
    sys.stdout.write(completion_script(root_parser(args.subcommands), args.shell))
    return EXIT_OK


def root_parser(sub: Any) -> argparse.ArgumentParser:
    """A ``kvenv`` parser over the subcommands registered in ``sub`` (the CLI's subparsers
    action: every group before this one in ``kvenv.cli._GROUPS`` has registered by the time a
    command runs, and this group is the last)."""
    root = argparse.ArgumentParser(prog="kvenv")
    root.add_argument("--version", action="version", version="kvenv")
    mine = root.add_subparsers(dest="command", metavar="COMMAND")
    mine.choices = sub.choices
    mine._choices_actions = sub._choices_actions
    return root


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell``."""
    if shell in ("bash", "zsh"):
        import shtab

        _mark(parser, shtab)
        preamble = _BASH_PREAMBLE if shell == "bash" else _ZSH_PREAMBLE
        text: str = shtab.complete(parser, shell=shell, preamble=preamble)
        return text if text.endswith("\n") else text + "\n"
    if shell == "fish":
        return _fish(parser)
    return _pwsh(parser)


def _commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``{name: (help, parser)}`` of ``parser``'s subcommands (aliases included)."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (helps.get(name, ""), sub)
    return found


def _takes_profile(parser: argparse.ArgumentParser) -> bool:
    return any(not a.option_strings and a.dest in _PROFILE_DESTS for a in parser._actions)


def _mark(parser: argparse.ArgumentParser, shtab: Any) -> None:
    """Tell shtab what each positional and path flag completes to (profile names, dirs,
    files), over every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark(sub, shtab)
        elif not action.option_strings and action.dest in _PROFILE_DESTS:
            names = {"bash": "_kvenv_profile_names", "zsh": "_kvenv_profile_names"}
            setattr(action, "complete", names)  # shtab reads ``action.complete``
        elif _DIR_FLAGS & set(action.option_strings):
            setattr(action, "complete", shtab.DIRECTORY)
        elif _FILE_FLAGS & set(action.option_strings):
            setattr(action, "complete", shtab.FILE)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS]


# -- fish ------------------------------------------------------------------------------------


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    lines = [
        "# kvenv completion for fish: `kvenv completion fish | source`",
        "complete -c kvenv -f",
        "complete -c kvenv -n __fish_use_subcommand -l version -d 'print the version'",
    ]
    for name, (about, _) in commands.items():
        lines.append(
            f"complete -c kvenv -n __fish_use_subcommand -a {name} -d {_fish_quote(about)}"
        )
    for name, (_, sub) in commands.items():
        when = f"__fish_seen_subcommand_from {name}"
        verbs = _commands(sub)
        if verbs:
            inner = " ".join(verbs)
            for verb, (about, _) in verbs.items():
                lines.append(
                    f"complete -c kvenv -n '{when}; and not __fish_seen_subcommand_from "
                    f"{inner}' -a {verb} -d {_fish_quote(about)}"
                )
        if _takes_profile(sub):
            lines.append(f"complete -c kvenv -n '{when}' -a '({NAMES_COMMAND})' -d profile")
        for action in _options(sub) + [a for v in verbs.values() for a in _options(v[1])]:
            parts = [f"complete -c kvenv -n '{when}'"]
            for flag in action.option_strings:
                parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
            if action.nargs != 0:
                if action.choices:
                    parts.append("-x -a " + _fish_quote(" ".join(map(str, action.choices))))
                elif _DIR_FLAGS & set(action.option_strings):
                    parts.append("-x -a '(__fish_complete_directories)'")
                else:
                    parts.append("-r -F")
            if action.help:
                parts.append(f"-d {_fish_quote(str(action.help))}")
            lines.append(" ".join(parts))
        for action in sub._actions:
            if not action.option_strings and action.choices and not verbs:
                choices = " ".join(map(str, action.choices))
                lines.append(f"complete -c kvenv -n '{when}' -a {_fish_quote(choices)}")
    return "\n".join(lines) + "\n"


# -- PowerShell -------------------------------------------------------------------------------


def _pwsh_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pwsh(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    table: list[str] = []
    for name, (_, sub) in commands.items():
        words = [flag for a in _options(sub) for flag in a.option_strings]
        words += list(_commands(sub))
        for action in sub._actions:
            if not action.option_strings and action.choices and not _commands(sub):
                words += [str(c) for c in action.choices]
        profile = "$true" if _takes_profile(sub) else "$false"
        quoted = ", ".join(_pwsh_quote(w) for w in words)
        table.append(f"    {_pwsh_quote(name)} = @{{ Words = @({quoted}); Profile = {profile} }}")
    command_list = ", ".join(_pwsh_quote(n) for n in commands)
    return (
        "# kvenv completion for PowerShell: "
        "`kvenv completion pwsh | Out-String | Invoke-Expression`\n"
        "$kvenvCommands = @{\n" + "\n".join(table) + "\n}\n"
        "Register-ArgumentCompleter -Native -CommandName kvenv -ScriptBlock {\n"
        "    param($wordToComplete, $commandAst, $cursorPosition)\n"
        "    $words = @($commandAst.CommandElements | Select-Object -Skip 1 | "
        "ForEach-Object { $_.ToString() })\n"
        "    if ($wordToComplete) { $words = @($words | Select-Object -SkipLast 1) }\n"
        f"    if ($words.Count -eq 0) {{ $candidates = @({command_list}, '--version') }}\n"
        "    elseif ($kvenvCommands.ContainsKey($words[0])) {\n"
        "        $entry = $kvenvCommands[$words[0]]\n"
        "        $candidates = @($entry.Words)\n"
        "        if ($entry.Profile) {\n"
        "            $candidates += @(& kvenv completion --profile-names 2>$null)\n"
        "        }\n"
        "    } else { $candidates = @() }\n"
        '    $candidates | Where-Object { $_ -like "$wordToComplete*" } | ForEach-Object {\n'
        "        [System.Management.Automation.CompletionResult]::new("
        "$_, $_, 'ParameterValue', $_)\n"
        "    }\n"
        "}\n"
    )
