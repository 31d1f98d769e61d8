"""A single-file bundle's commands, run once its verifier (:mod:`kvenv.cli.pyzboot`) passed:
``python kvenv-PROFILE.pyz apply|verify|activate|status|plan [options]`` and ``--about``.

Each command is kvenv's own, run on the file's profile: its small files (profile, lock, host
snapshot) are unpacked into a per-digest directory of the user cache
(:func:`kvenv.fetch.pyzread.unpack_project`), and ``apply`` first streams the wheels the artifact
cache lacks from the file into that cache, checked on the way, then applies with
``--offline``. The host interpreter is the one running the file unless ``--python`` or
``$KVENV_PYTHON`` names another.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from kvenv.fetch.pyzread import OpenedFile

COMMANDS = ("apply", "verify", "activate", "status", "plan")
_HOSTED = ("apply", "verify", "status", "plan")  # the commands that take --python


def _usage(name: str, opened: OpenedFile) -> str:
    profile = opened.profile_name
    return (
        f"usage: python {name} {{{','.join(COMMANDS)}}} [options] | --about\n\n"
        f"kvenv {opened.manifest.get('kvenv_version', '?')} with the profile {profile}, its lock "
        "and every wheel, for an offline install with no kvenv installed:\n"
        f"  python {name} apply      install it (no network) into the profile's runtime root\n"
        f'  eval "$(python {name} activate)"   activate it in a shell\n'
        f"  python {name} status     what is applied\n"
        f"  python {name} verify     check the installed files\n"
        f"  python {name} --about    what the file holds and which interpreters run it\n"
        f"Each command takes kvenv's options (`python {name} apply --help`)."
    )


def run_file(archive: str, sha256: str, argv: list[str]) -> int:
    """Run ``argv`` (the command line after the file's name) on the verified file."""
    from pathlib import Path

    from kvenv.cli import exit_code_for, main
    from kvenv.cli._io import err, out, report_kvenv_error
    from kvenv.errors import KvenvError, UsageError
    from kvenv.fetch.pyzread import open_single_file

    path = Path(archive)
    name = path.name
    try:
        opened = open_single_file(path, sha256)
        if not argv or argv[0] in ("-h", "--help", "help"):
            out(_usage(name, opened))
            return 0
        if argv[0] == "--about":
            out(about(opened))
            return 0
        command, rest = argv[0], list(argv[1:])
        if command not in COMMANDS:
            raise UsageError(
                f"{name} runs {', '.join(COMMANDS)} (and --about), not {command!r}",
                hint=f"python {name} --help",
            )
        rest = _without_profile(rest, opened.profile_name, name)
        profile = _profile_file(opened, rest)
        if command in _HOSTED and not _named_python(rest):
            rest += ["--python", sys.executable]
        if command == "apply":
            if not {"-h", "--help", "--dry-run"} & set(rest):  # those install nothing
                _stream(opened, profile, rest)
            if "--offline" not in rest:
                rest.append("--offline")
    except KvenvError as error:
        return report_kvenv_error(error, exit_code_for(error), as_json="--json" in argv)
    except OSError as error:
        err(f"kvenv: error: {error.strerror or error}: {error.filename or path}")
        return 2
    from kvenv.cli.hints import run_as

    before = run_as([_interpreter(), str(path)], str(profile))  # fixes: `python FILE VERB …`
    try:
        return main([command, str(profile), *rest])
    finally:
        run_as(*before)


def _interpreter() -> str:
    """This interpreter as a user would type it: its name when PATH finds it, else its path."""
    import shutil

    name = os.path.basename(sys.executable)
    found = shutil.which(name)
    same = found is not None and os.path.realpath(found) == os.path.realpath(sys.executable)
    return name if same else sys.executable


def _without_profile(rest: list[str], profile: str, name: str) -> list[str]:
    """The command line without a leading profile name (the file holds one: it is refused
    when another is named)."""
    from kvenv.errors import UsageError

    if rest and not rest[0].startswith("-"):
        if rest[0] != profile:
            raise UsageError(
                f"{name} holds the profile {profile} only, not {rest[0]!r}",
                hint=f"leave the profile out: python {name} COMMAND",
            )
        return rest[1:]
    return rest


def _named_python(rest: list[str]) -> bool:
    named = any(w == "--python" or w.startswith("--python=") for w in rest)
    return named or bool(os.environ.get("KVENV_PYTHON"))


def _profile_file(opened: OpenedFile, rest: list[str]) -> Path:
    from kvenv.fetch.pyzread import unpack_project
    from kvenv.model.places import user_cache_dir

    # Not $KVENV_CACHE_DIR nor --cache: every command of this file must name the same profile
    # file, which a runtime root records as its owner.
    directory = unpack_project(opened, user_cache_dir())
    return directory / opened.profile_file


def _stream(opened: OpenedFile, profile: Path, rest: list[str]) -> None:
    """Stream the wheels that the artifact cache this apply uses lacks from the file into it;
    when none is missing (a repeated apply) nothing but a ``stat`` per wheel is paid."""
    from kvenv.fetch.cache import ArtifactCache

    cache = _apply_cache(profile, rest)
    store = ArtifactCache(cache)
    wanted = opened.artifacts
    if all(store.lookup(a["sha256"], a["size"], a["filename"], rehash=False) for a in wanted):
        return
    from kvenv.fetch.pyz import stream_artifacts

    stream_artifacts(opened, cache)


def _apply_cache(profile: Path, rest: list[str]) -> Path:
    """The artifact cache ``apply`` will use: ``--cache``, ``$KVENV_CACHE_DIR``, the profile's
    ``[paths] cache``, else the user cache (kvenv.model.places, as apply resolves it)."""
    import argparse

    from kvenv._util import tomlio
    from kvenv.model.places import choose_places

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--root")
    parser.add_argument("--cache")
    known, _ = parser.parse_known_args(rest)
    data = tomlio.loads(profile.read_text(encoding="utf-8"), file=str(profile))
    paths = data.get("paths", {})
    _, _, cache, _ = choose_places(
        str(data.get("name", "")),
        root=known.root,
        cache=known.cache,
        configured_root=paths.get("root"),
        configured_cache=paths.get("cache"),
        environ=os.environ,
    )
    return cache


def about(opened: OpenedFile) -> str:
    """What ``--about`` prints: the profile, the interpreters, what is in ``lib/`` and what
    was left out, and the file's sha256."""
    manifest = opened.manifest
    major, minor = manifest.get("requires_python", [3, 10])
    wheels = opened.artifacts
    size = sum(int(a.get("size", 0)) for a in wheels)
    lines = [
        f"{opened.path.name}: kvenv single-file bundle (kvenv {manifest.get('kvenv_version')})",
        f"  sha256:  {opened.sha256}",
        f"  profile: {opened.profile_name} ({len(wheels)} wheel(s), {size / 1e6:.1f} MB)",
        f"  runs on: CPython {major}.{minor} or newer (built with {manifest.get('built_with')})",
        "  kvenv and the pure-Python dependencies in the file: "
        + ", ".join(f"{d['name']} {d['version']}" for d in manifest.get("included", [])),
        "  left out:",
    ]
    lines += [f"    {d['name']}: {d['why']}" for d in manifest.get("left_out", [])]
    return "\n".join(lines)
