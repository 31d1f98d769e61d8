"""Cache commands: ``kvenv cache verify``, ``prune`` and ``clean``.

Which cache: a named profile's (``--cache``, ``$KVENV_CACHE_DIR``, its ``[paths] cache``, the
user cache: the one its ``apply`` uses); with no profile named (and no ``$KVENV_PROFILE``), the
default cache every profile without ``[paths] cache`` shares (``--cache``, ``$KVENV_CACHE_DIR``,
the user cache), not the default profile's. ``-v`` says which and why; a cache directory that
does not exist is said to, never reported as "no damage found"."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvenv.cli._io import emit_json, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_OK

if TYPE_CHECKING:
    from kvenv.model.locations import Locations


def register(sub: Any) -> None:
    from kvenv.cli.options import path_value

    cache = sub.add_parser(
        "cache",
        help="verify, prune or clean the download cache and the store",
        description="Check the cached wheels and the unpacked store entries (verify), remove "
        "what is damaged or left unfinished (prune), or remove them all (clean).",
    )
    verbs = cache.add_subparsers(dest="cache_command", metavar="VERB", required=True)
    for name, text in (
        ("verify", "re-hash every cached wheel and check every store entry (exit 1: damage)"),
        ("prune", "remove damaged cached wheels and store entries, and unfinished leftovers"),
        ("clean", "remove the store and the cached wheels (applied generations keep working)"),
    ):
        p = verbs.add_parser(name, help=text, description=text)
        p.add_argument(
            "profile",
            nargs="?",
            metavar="PROFILE",
            help="whose cache (default: $KVENV_PROFILE's, else the default cache)",
        )
        p.add_argument(
            "--cache",
            type=path_value,
            metavar="DIR",
            help="cache (default: $KVENV_CACHE_DIR, [paths])",
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name != "verify":
            p.add_argument("--dry-run", action="store_true", help="say what would be removed")
        p.set_defaults(func=cmd_cache)


def _locations(args: argparse.Namespace) -> Locations:
    """The cache this command acts on (see the module docstring), said under ``-v``."""
    import os

    from kvenv.cli._io import detail
    from kvenv.model.locations import Locations
    from kvenv.model.places import ENV_DEFAULT, choose_places

    if args.profile is not None or os.environ.get(ENV_DEFAULT):
        from kvenv.env.place import find_place

        place = find_place(args.profile, cache=args.cache)
        loaded, locations = place.loaded, place.locations
        detail(f"profile {loaded.profile.name}: {loaded.path} ({loaded.origin})")
    else:
        root, root_from, cache, cache_from = choose_places(
            "",
            root=None,
            cache=args.cache,
            configured_root=None,
            configured_cache=None,
            environ=os.environ,
        )
        locations = Locations(root, cache, root_from, cache_from)
        detail("no profile named: the default cache, shared by every profile without one")
    detail(f"cache: {locations.cache} (from {locations.cache_from})")
    return locations


def _missing(args: argparse.Namespace, locations: Locations) -> int | None:
    """When the cache directory does not exist: say so (verify: exit 2, nothing to check);
    else None. A cache that is a file is refused as one (exit 2), for every cache command."""
    from kvenv.env.placecheck import refuse_file_places
    from kvenv.errors import InputError

    if locations.cache.is_dir():
        return None
    refuse_file_places(locations)  # a file, not a directory: say that, and where it was set
    what = f"cache {locations.cache} (from {locations.cache_from}) does not exist"
    if args.cache_command == "verify":
        raise InputError(
            f"{what}: nothing to verify",
            hint="name the cache an apply used: `kvenv cache verify PROFILE` or --cache DIR "
            "(`kvenv apply -v` says which cache it uses)",
        )
    if args.json:
        emit_json(
            {"cache": str(locations.cache), "dry_run": args.dry_run, "damaged": [], "removed": []}
        )
    else:
        out(f"{what}: nothing to remove")
    return EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    locations = _locations(args)
    missing = _missing(args, locations)
    if missing is not None:
        return missing
    if args.cache_command == "verify":
        from kvenv.cli.hints import fix_command
        from kvenv.env.integrity import cache_damage

        damage = cache_damage(locations, rehash=True)
        rows = [{"kind": d.kind, "path": d.path, "message": d.message} for d in damage]
        if args.json:
            emit_json({"cache": str(locations.cache), "ok": not damage, "damaged": rows})
        else:
            for d in damage:
                out(f"damaged: {d.message}")
            out(
                f"cache {locations.cache}: "
                + ("no damage found" if not damage else f"{len(damage)} damaged entr(y/ies)")
            )
            if damage:
                command = fix_command(args, "cache", "prune")
                out(f"fix: `{command}` removes them; the next apply fetches them again")
        return EXIT_CHECK_FAILED if damage else EXIT_OK
    from kvenv.env.cachedir import clean, prune

    if args.cache_command == "prune":
        damage, removed = prune(locations, dry_run=args.dry_run)
        messages = [d.message for d in damage]
    else:
        removed, messages = clean(locations, dry_run=args.dry_run), []
    if args.json:
        emit_json(
            {
                "cache": str(locations.cache),
                "dry_run": args.dry_run,
                "damaged": messages,
                "removed": removed,
            }
        )
        return EXIT_OK
    for message in messages:
        out(f"damaged: {message}")
    verb = "would remove" if args.dry_run else "removed"
    for path in removed:
        out(f"{verb} {path}")
    if not removed:
        out(f"cache {locations.cache}: nothing to remove")
    return EXIT_OK
