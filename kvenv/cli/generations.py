"""What is installed and going back: ``list`` (the distributions of the current generation),
``generations`` (the kept ones) and ``rollback`` (switch to a kept one that still verifies).

Nothing heavy at module level; each command imports what it needs.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvenv.cli._io import emit_json, err, out
from kvenv.cli.exitcodes import EXIT_OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", nargs="?", metavar="PROFILE", help="name or .toml (default profile)")
    from kvenv.cli.options import place_options

    place_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "list", help="every distribution of the current generation: native, overlay, host"
    )
    _common(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "generations", help="the kept generations: time, profile and lock digests, current"
    )
    _common(p)
    p.set_defaults(func=cmd_generations)

    p = sub.add_parser(
        "rollback",
        help="switch to a kept generation (default: the one before the current), if it verifies",
    )
    _common(p)
    p.add_argument(
        "generation",
        nargs="?",
        metavar="GENERATION",
        help="a generation id from `kvenv generations` (alone: of the default profile)",
    )
    p.add_argument("--no-wait", action="store_true", help="fail if an apply runs on the root")
    p.set_defaults(func=cmd_rollback)


def cmd_list(args: argparse.Namespace) -> int:
    import attrs

    from kvenv.cli.apply import _owned
    from kvenv.env.generations import absent_protected, installed_rows
    from kvenv.env.root import current_manifest
    from kvenv.errors import InputError

    loaded, locations = _owned(args)
    manifest = current_manifest(locations.root) if locations.root.is_dir() else None
    if manifest is None:
        raise InputError(
            f"nothing is applied for profile {loaded.profile.name} in {locations.root}",
            hint="run `{kvenv apply}` first",
        )
    rows = installed_rows(manifest)
    absent = absent_protected(manifest)
    if args.json:
        emit_json(
            {
                "root": str(locations.root),
                "generation": manifest.generation,
                "host_python": manifest.python,  # the host it was applied for (as recorded)
                "distributions": [attrs.asdict(r) for r in rows],
                "host_absent": absent,
            }
        )
        return EXIT_OK
    width = max([len(r.name) for r in rows] + [7])
    out(f"{'Package':<{width}}  {'Version':<20}  Origin")
    out(f"{'-' * width}  {'-' * 20}  -------")
    for row in rows:
        out(f"{row.name:<{width}}  {row.version or '(unknown)':<20}  {row.origin}")
    if absent:
        out(f"protected, absent on the host when applied: {', '.join(absent)}")
    if manifest.python:
        out(f"host python: {manifest.python} (recorded in the current generation's manifest)")
    return EXIT_OK


def cmd_generations(args: argparse.Namespace) -> int:
    import attrs

    from kvenv.cli.apply import _owned
    from kvenv.env.generations import generation_infos

    _, locations = _owned(args)
    infos = generation_infos(locations)
    if args.json:
        emit_json({"root": str(locations.root), "generations": [attrs.asdict(i) for i in infos]})
        return EXIT_OK
    if not infos:
        out(f"no generations in {locations.root}")
        return EXIT_OK
    for info in infos:
        mark = "*" if info.current else " "
        if not info.complete:
            out(f"{mark} {info.generation}  incomplete: {info.note}")
            continue
        out(
            f"{mark} {info.generation}  {info.created_at}  profile {info.profile} "
            f"{info.profile_digest}  lock {info.lock_digest or 'none'}"
            + (f"  native {info.native}" if info.native else "")
        )
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    from kvenv.cli.apply import _owned
    from kvenv.env.generations import rollback
    from kvenv.errors import UsageError

    if args.generation is None and args.profile and _looks_like_generation(args.profile):
        args.profile, args.generation = None, args.profile  # `kvenv rollback GENERATION`
    if args.generation is not None and not _looks_like_generation(args.generation):
        raise UsageError(
            f"not a generation id: {args.generation!r}",
            hint="`{kvenv generations}` lists the kept ones (ids like 20260101T120000-abc123)",
        )
    requested = args.generation
    _, locations = _owned(args)
    result = rollback(locations, requested, wait=not args.no_wait, on_wait=err)
    if args.json:
        emit_json(
            {
                "root": result.root,
                "generation": result.generation,
                "previous": result.previous,
                "manifest": result.manifest,
                "changed": result.changed,
            }
        )
        return EXIT_OK
    if not result.changed:
        out(f"generation {result.generation} is already current; nothing to do")
    else:
        out(f"rolled back: generation {result.generation} is current (was {result.previous})")
        out(f"manifest: {result.manifest}")
    return EXIT_OK


def _looks_like_generation(word: str) -> bool:
    stamp, _, tail = word.partition("-")
    return len(stamp) == 15 and stamp[8] == "T" and stamp.replace("T", "").isdigit() and bool(tail)
