"""``kvenv add REQ...`` and ``kvenv remove NAME...``: edit the profile's ``[overlay]
requires`` in place (comments, order and formatting kept: :mod:`kvenv.model.profileedit`,
tomlkit), then relock. If the edited profile would not load, nothing is written; if the relock
fails, the profile file is put back exactly as it was (and the lock is untouched: ``kvenv
lock`` writes it only once resolved).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvenv.cli._io import out
from kvenv.cli.exitcodes import EXIT_OK

# ``kvenv lock`` flags a relock passes on (name on the command line, attribute, takes a value)
_LOCK_FLAGS: tuple[tuple[str, str, bool], ...] = (
    ("--index-url", "index_url", True),
    ("--extra-index-url", "extra_index_url", True),
    ("--find-links", "find_links", True),
    ("--no-index", "no_index", False),
    ("--offline", "offline", False),
    ("--refresh", "refresh", False),
    ("--exclude-newer", "exclude_newer", True),
    ("--native-requires", "native_requires", True),
    ("--cache-dir", "cache_dir", True),
    ("--json", "json", False),
)


def register(sub: Any) -> None:
    for verb, help_text, arg_help in (
        (
            "add",
            "declare overlay requirements in the profile ([overlay] requires), then relock",
            "PEP 508 requirements (rich, 'datasets[audio]>=3', \"uvloop; sys_platform == "
            "'linux'\"); one that names a package already declared replaces it",
        ),
        (
            "remove",
            "drop declared overlay requirements from the profile, then relock",
            "names of requirements the profile declares in [overlay] requires",
        ),
    ):
        parser = sub.add_parser(
            verb,
            help=help_text,
            description=f"{help_text[0].upper()}{help_text[1:]}. The profile file is edited in "
            "place (comments and formatting kept); a built-in profile is never edited. If the "
            "relock fails the file is restored byte for byte. Exit codes: 0 ok, 2 bad input, "
            "3 conflict.",
        )
        parser.add_argument("requirements", nargs="+", metavar="REQ" if verb == "add" else "NAME",
                            help=arg_help)  # fmt: skip
        parser.add_argument("--profile", "-p", help="profile name or .toml path")
        parser.add_argument(
            "--no-lock", action="store_true", help="edit the profile only; do not relock"
        )
        parser.add_argument("--index-url", help="the main index for the relock")
        parser.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
        parser.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
        parser.add_argument("--no-index", action="store_true", help="use only --find-links")
        parser.add_argument("--offline", action="store_true", help="relock from the cache")
        parser.add_argument("--refresh", action="store_true", help="revalidate index pages")
        parser.add_argument("--exclude-newer", metavar="DATE", help="as `kvenv lock`")
        parser.add_argument("--native-requires", type=Path, metavar="FILE", help="as `kvenv lock`")
        parser.add_argument("--cache-dir", help="cache directory (default: user cache)")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument("--format", choices=("text", "markdown"), default="text",
                            help="how to print the lock's changes")  # fmt: skip
        parser.set_defaults(func=cmd_edit, verb=verb)


def cmd_edit(args: argparse.Namespace) -> int:
    from kvenv.model.loading import load_profile
    from kvenv.model.profileedit import edit_profile, editable_path

    loaded = load_profile(args.profile)
    path = editable_path(loaded, args.verb)
    said: list[str] = []

    def change(document: Any) -> None:
        said.extend(_edited(args.verb, document, args.requirements, loaded))

    # the edited profile must load (a protected name, a duplicate: refused as the lock would)
    # before it is written; if the relock fails, the file is put back byte for byte
    with edit_profile(path, change):
        if not args.json:
            for line in said:
                out(line)
        return EXIT_OK if args.no_lock else _relock(args, path)


def _edited(verb: str, document: Any, given: list[str], loaded: Any) -> list[str]:
    """Add ``given`` to (or remove it from) the tomlkit ``document``'s ``[overlay] requires``;
    what was done, one line each."""
    import tomlkit

    overlay = document.get("overlay")
    if overlay is None:
        overlay = tomlkit.table()
        document["overlay"] = overlay
    requires = overlay.get("requires")
    if requires is None:
        requires = tomlkit.array()
        requires.multiline(True)
        overlay["requires"] = requires
    edit = _add if verb == "add" else _remove
    return edit(requires, given, loaded)


def _add(requires: Any, given: list[str], loaded: Any) -> list[str]:
    from packaging.requirements import InvalidRequirement, Requirement

    from kvenv.errors import InputError, Problem
    from kvenv.model.loading import requirement_name

    said: list[str] = []
    problems: list[Problem] = []
    for index, text in enumerate(given):
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            problems.append(
                Problem(
                    f"not a PEP 508 requirement: {text!r} ({exc})",
                    path=f"argument {index + 1}",
                    fix="write e.g. rich, 'rich>=13', 'datasets[audio]'",
                )
            )
            continue
        name = requirement_name(text)
        at = next((i for i, old in enumerate(requires) if requirement_name(str(old)) == name), None)
        if at is None:
            requires.append(text)
            said.append(f"added {text!r} to [overlay] requires of {loaded.path}")
        else:
            old = str(requires[at])
            requires[at] = text
            said.append(f"replaced {old!r} with {text!r} in [overlay] requires of {loaded.path}")
    if problems:
        raise InputError("kvenv add: invalid requirement", problems=problems)
    return said


def _remove(requires: Any, given: list[str], loaded: Any) -> list[str]:
    from kvenv.errors import InputError, Problem
    from kvenv.model.loading import requirement_name

    said: list[str] = []
    declared = [str(r) for r in requires]
    inherited = [r for r in loaded.profile.overlay.requires if r not in declared]
    problems: list[Problem] = []
    for text in given:
        name = requirement_name(text)
        at = next((i for i, old in enumerate(requires) if requirement_name(str(old)) == name), None)
        if at is None:
            parent = [r for r in inherited if requirement_name(r) == name]
            fix = (
                f"{parent[0]!r} comes from a parent profile (extends); remove it there"
                if parent
                else "declared: " + (", ".join(repr(d) for d in declared) or "nothing")
            )
            problems.append(
                Problem(
                    f"{text!r} is not declared in [overlay] requires",
                    file=str(loaded.path),
                    path="$.overlay.requires",
                    fix=fix,
                )
            )
            continue
        old = str(requires[at])
        del requires[at]
        said.append(f"removed {old!r} from [overlay] requires of {loaded.path}")
    if problems:
        raise InputError("kvenv remove: not declared", problems=problems)
    return said


def _relock(args: argparse.Namespace, path: Path) -> int:
    """``kvenv lock PROFILE`` with the flags given to this command, run as the lock command
    runs (its change report included)."""
    import kvenv.cli.lock as lock

    parser = argparse.ArgumentParser(prog="kvenv")
    lock.register(parser.add_subparsers())
    argv = ["lock", str(path), "--format", args.format]
    for flag, name, takes in _LOCK_FLAGS:
        value = getattr(args, name)
        if not takes:
            argv.extend([flag] if value else [])
        elif isinstance(value, list):
            for item in value:
                argv.extend([flag, str(item)])
        elif value is not None:
            argv.extend([flag, str(value)])
    namespace = parser.parse_args(argv)
    result: int = lock.run(namespace)
    return result
