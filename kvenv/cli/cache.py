"""Cache commands: ``kvenv cache verify``, ``prune`` and ``clean``."""

from __future__ import annotations

import argparse
from typing import Any

from kvenv.cli._io import emit_json, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_OK


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
            "profile", nargs="?", metavar="PROFILE", help="whose cache (default profile)"
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


def cmd_cache(args: argparse.Namespace) -> int:
    from kvenv.model.loading import load_profile
    from kvenv.model.locations import resolve_locations

    loaded = load_profile(args.profile)
    locations = resolve_locations(loaded.profile, cache=args.cache)
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
