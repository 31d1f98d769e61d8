"""``kvenv pin SOURCE``: write a profile's ``[native]`` and ``[native.source]`` from a wheel
file, an https URL, ``hf://ORG/REPO@REVISION/FILE`` or ``NAME==VERSION`` on the index, then
relock (``--no-lock`` skips it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvenv.cli._io import emit_json, err, out
from kvenv.cli.exitcodes import EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "pin",
        help="pin the native wheel: write [native] from a file, URL, hf:// or NAME==VERSION",
        description="Write the profile's [native] (name, version, sha256, size) and "
        "[native.source] from SOURCE: a wheel file inside the project, an https URL, "
        "hf://ORG/REPO@REVISION/FILE (the revision recorded as its 40-hex commit) or "
        "NAME==VERSION from the index (the wheel for the profile's target; --file picks one "
        "of several). The profile keeps its comments and formatting; then the lock is "
        "written as `kvenv lock` writes it (--no-lock skips it). A failed lock leaves the "
        "profile as it was. Exit codes: 0 ok, 2 bad input, 3 conflict.",
    )
    p.add_argument("source", metavar="SOURCE", help="FILE.whl, https URL, hf://... or NAME==VER")
    p.add_argument("--profile", "-p", metavar="PROFILE", help="profile name or .toml path")
    p.add_argument(
        "--file", metavar="FILENAME", help="with NAME==VERSION: the wheel file to pin of several"
    )
    p.add_argument("--no-lock", action="store_true", help="write the profile only; no relock")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--index-url", help="the main index (default: unearth's default index)")
    p.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    p.add_argument("--no-index", action="store_true", help="use only --find-links")
    p.add_argument("--offline", action="store_true", help="use only the cache; no network")
    p.add_argument("--cache-dir", help="cache directory (default: user cache)")
    p.set_defaults(func=cmd_pin)


def _finder(args: argparse.Namespace, loaded: Any) -> Any:
    """The lock's finder for the profile's target, with this command's index flags."""
    from kvenv.cli.lock import _cache_dir, _index_flags
    from kvenv.lock.cache import IndexCache
    from kvenv.lock.engine import _target
    from kvenv.lock.finder import Finder
    from kvenv.lock.sources import index_config
    from kvenv.model.locations import default_cache_dir

    cache = IndexCache(_cache_dir(args.cache_dir) or default_cache_dir())
    config = index_config(**_index_flags(args))
    return Finder(config, _target(loaded), cache, offline=args.offline)


def _pinned(args: argparse.Namespace, loaded: Any) -> Any:
    from kvenv.errors import UsageError
    from kvenv.fetch import pin

    kind = pin.source_kind(args.source)
    if args.file is not None and kind != "index":
        raise UsageError("--file chooses among the index's wheels: only with NAME==VERSION")
    if kind == "hf":
        return pin.pin_hf(args.source)
    if kind == "url":
        return pin.pin_url(args.source)
    if kind == "path":
        return pin.pin_file(Path(args.source), loaded.base_dir)
    finder = _finder(args, loaded)
    try:
        named = [u for u in (args.index_url, *args.extra_index_url) if u]
        return pin.pin_index(args.source, finder, filename=args.file, named=named)
    finally:
        finder.close()


def set_native(document: Any, pinned: Any) -> None:
    """Write ``pinned`` into the tomlkit ``document``'s ``[native]`` (keeping its other keys,
    such as ``provided_libs``, and its comments) and replace ``[native.source]`` whole."""
    import tomlkit

    native = document.get("native")
    if native is None:
        native = tomlkit.table()
        document.add(tomlkit.nl())
        document.add("native", native)
    for key, value in (
        ("name", pinned.name),
        ("version", pinned.version),
        ("sha256", pinned.sha256),
        ("size", pinned.size),
    ):
        native[key] = value
    source = tomlkit.table()
    for key, value in pinned.source.items():
        source[key] = value
    old = native.get("source")
    if old is None:
        native.add("source", source)
        return
    body = old.value.body  # the old table's closing blank lines and comments stay after it
    first = len(body)
    while first and body[first - 1][0] is None:
        first -= 1
    for _, item in body[first:]:
        source.append(None, item)
    native["source"] = source


def _lock_args(args: argparse.Namespace, profile: str) -> argparse.Namespace:
    """``kvenv lock PROFILE`` with this command's index flags, parsed by lock's own parser (so
    every lock option has its default)."""
    import kvenv.cli.lock as lock

    parser = argparse.ArgumentParser(prog="kvenv", add_help=False)
    lock.register(parser.add_subparsers(dest="command"))
    argv = ["lock", profile]
    if args.index_url:
        argv += ["--index-url", args.index_url]
    for url in args.extra_index_url:
        argv += ["--extra-index-url", url]
    for location in args.find_links:
        argv += ["--find-links", location]
    for flag in ("no_index", "offline", "json"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    if args.cache_dir:
        argv += ["--cache-dir", args.cache_dir]
    return parser.parse_args(argv)


def cmd_pin(args: argparse.Namespace) -> int:
    from kvenv.errors import KvenvError
    from kvenv.model.loading import load_profile
    from kvenv.model.profileedit import edit_profile, editable_path

    loaded = load_profile(args.profile)
    path = editable_path(loaded, "pin")
    pinned = _pinned(args, loaded)
    old = loaded.profile.native
    with edit_profile(path, lambda document: set_native(document, pinned)) as edit:
        summary = {
            "profile": str(path),
            "changed": edit.changed,
            "native": {
                "name": pinned.name,
                "version": pinned.version,
                "sha256": pinned.sha256,
                "size": pinned.size,
                "source": dict(pinned.source),
            },
            "previous": None
            if old is None
            else {"name": old.name, "version": old.version, "sha256": old.sha256},
            "notes": list(pinned.notes),
        }
        if not args.json:
            for note in pinned.notes:
                err(f"note: {note}")
            before = f"{old.name} {old.version} -> " if old is not None else ""
            what = "pinned" if edit.changed else "unchanged"
            out(f"{what}: {before}{pinned.name} {pinned.version} ({pinned.filename}) in {path}")
            out(f"  sha256 {pinned.sha256}, {pinned.size} bytes, source {pinned.source['kind']}")
        if args.no_lock:
            if args.json:
                emit_json(summary)
            else:
                out(f"next: kvenv lock {path}")
            return EXIT_OK
        try:
            code = _relock(args, str(path), summary)
        except KvenvError as exc:
            problems, hint = exc._templates  # the fixes still to be completed by the CLI
            raise type(exc)(
                exc.message,
                problems=problems,
                hint=(hint + "; " if hint else "")
                + f"{path} was left as it was (the pin is written only with its lock; "
                "--no-lock writes it alone)",
            ) from None
        return code


def _relock(args: argparse.Namespace, profile: str, summary: dict[str, Any]) -> int:
    """``kvenv lock`` of the edited profile; with ``--json`` its report goes into ``summary``
    (``lock``), printed as one document."""
    import kvenv.cli.lock as lock

    lock_args = _lock_args(args, profile)
    if not args.json:
        return lock.run(lock_args)
    import contextlib
    import io
    import json

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = lock.run(lock_args)
    text = captured.getvalue()
    summary["lock"] = json.loads(text) if text.strip() else None
    emit_json(summary)
    return code
