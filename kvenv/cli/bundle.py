"""``kvenv bundle``: gather a profile's artifacts for an offline apply, or check a bundle.

Nothing heavy at module level; the fetch machinery is imported by the command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kvenv.cli._io import TerminalProgress, emit_json, out
from kvenv.cli.exitcodes import EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bundle",
        help="gather every artifact, the profile and the lock into DIR for an offline apply",
        description="Make an offline bundle (for `kvenv apply --offline --from DIR`), or check "
        "one with --verify DIR (exit 1 if any file differs from SHA256SUMS).",
    )
    p.add_argument("profile", nargs="?", metavar="NAME|PATH", help="default: the default profile")
    p.add_argument("-o", "--output", metavar="DIR", help="the bundle directory to write")
    p.add_argument(
        "--single-file",
        metavar="FILE",
        help="write one file instead (FILE.pyz: the bundle, kvenv and its pure-Python "
        "dependencies; `python FILE apply` installs it offline with no kvenv installed)",
    )
    p.add_argument("--verify", metavar="DIR", help="check an existing bundle instead")
    p.add_argument("--cache", metavar="DIR", help="artifact cache (default: the user cache)")
    p.add_argument("--offline", action="store_true", help="use the cache only, no network")
    from kvenv.cli.options import jobs_value

    p.add_argument(
        "--jobs", type=jobs_value, default=8, metavar="N", help="parallel downloads (8; 1-256)"
    )
    p.add_argument("--index-url", action="append", default=[], metavar="URL")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR|URL")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from kvenv.errors import UsageError

    if args.verify and (args.output or args.profile or args.single_file):
        raise UsageError("--verify DIR takes no profile, no -o and no --single-file")
    if args.verify:
        return _verify(Path(args.verify), as_json=args.json)
    if args.output and args.single_file:
        raise UsageError("give either -o DIR (a directory) or --single-file FILE, not both")
    if args.single_file:
        return _make_single_file(args)
    if not args.output:
        raise UsageError("give the bundle directory with -o DIR (or --verify DIR)")
    return _make(args)


def _gathering(args: argparse.Namespace) -> dict[str, Any]:
    """Where both kinds of bundle gather their wheels from: the options they share."""
    from kvenv.model.locations import given_path

    return {
        "cache": None if args.cache is None else given_path(args.cache, "--cache"),
        "offline": args.offline,
        "jobs": args.jobs,
        "index_urls": args.index_url,
        "find_links": args.find_links,
    }


def _make(args: argparse.Namespace) -> int:
    from kvenv.fetch.bundle import make_bundle
    from kvenv.model.loading import load_profile

    loaded = load_profile(args.profile)
    progress = TerminalProgress("bundling", enabled=sys.stderr.isatty() and not args.json)
    try:
        info = make_bundle(
            loaded,
            Path(args.output),
            progress=progress,
            **_gathering(args),
        )
    finally:
        progress.close()
    if args.json:
        emit_json(info.to_json())
        return EXIT_OK
    total = sum(item.size for item in info.artifacts)
    out(f"bundle for {info.index.profile.name} written to {info.root}")
    wheels, files = len(info.artifacts), len(info.sums)
    out(f"  {wheels} wheel(s), {total / 1e6:.1f} MB; {files} files in SHA256SUMS")
    out(f"  install offline with: kvenv apply --offline --from {info.root}")
    return EXIT_OK


def _make_single_file(args: argparse.Namespace) -> int:
    from kvenv.fetch.pyz import make_single_file
    from kvenv.model.loading import load_profile
    from kvenv.model.locations import given_path

    loaded = load_profile(args.profile)
    progress = TerminalProgress("bundling", enabled=sys.stderr.isatty() and not args.json)
    try:
        made = make_single_file(
            loaded,
            given_path(args.single_file, "--single-file"),
            boot=_verifier_source(),
            progress=progress,
            **_gathering(args),
        )
    finally:
        progress.close()
    if args.json:
        emit_json(made.to_json())
        return EXIT_OK
    total = sum(item.size for item in made.index.artifacts)
    wheels = len(made.index.artifacts)
    out(f"single-file bundle for {made.index.profile.name} written to {made.path}")
    out(f"  {wheels} wheel(s), {total / 1e6:.1f} MB; the file {made.size / 1e6:.1f} MB")
    out(f"  sha256 {made.sha256}  (check a copy: sha256sum, or python FILE --sha256 HEX ...)")
    major, minor = made.requires
    out(f"  runs on CPython {major}.{minor} or newer, with no kvenv installed and no network:")
    out(f"  python {made.path.name} apply; then python {made.path.name} activate|status|verify")
    return EXIT_OK


def _verifier_source() -> str:
    """The text of kvenv/cli/pyzboot.py, the file's ``__main__.py``: read as data (a file, or
    a member of the zip kvenv runs from), not imported (it imports the runner)."""
    import pkgutil

    data = pkgutil.get_data(__package__ or "", "pyzboot.py")  # this package: kvenv.cli
    if data is None:
        from kvenv.errors import InputError

        raise InputError("kvenv's own kvenv/cli/pyzboot.py cannot be read")
    return data.decode("utf-8")


def _verify(directory: Path, *, as_json: bool) -> int:
    from kvenv.errors import CheckFailed, IntegrityError
    from kvenv.fetch.bundle import open_bundle

    try:
        info = open_bundle(directory)
    except IntegrityError as error:
        raise error.recast(CheckFailed) from None
    if as_json:
        emit_json(info.to_json())
    else:
        out(f"bundle {info.root}: {len(info.sums)} files match SHA256SUMS")
    return EXIT_OK
