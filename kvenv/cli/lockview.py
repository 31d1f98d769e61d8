"""``kvenv why``, ``kvenv tree`` and ``kvenv export``: a profile's lock read offline and shown
as chains, as a tree, or as pins another installer uses."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvenv.cli._io import emit_json, out
from kvenv.cli.exitcodes import EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "why",
        help="every chain from a root (the native wheel, a declared requirement) to a package",
        description="Every chain of requirements from a root of the profile's lock (the "
        "native wheel, each declared requirement) down to NAME: a locked package, a host "
        "package the lock relies on, or a waived requirement. Offline, from the lock alone. "
        "Exit codes: 0 ok, 2 bad input (a name not in the lock: the closest are named).",
    )
    p.add_argument("name", metavar="NAME", help="a package name")
    _profile_args(p)
    p.set_defaults(func=cmd_why)

    p = sub.add_parser(
        "tree",
        help="the lock's dependency tree, from the native wheel and declared requirements",
        description="The profile's lock as a tree from its roots (each subtree drawn once; "
        "(*) marks one drawn above), or with --invert NAME everything that requires NAME, "
        "up to the roots. Offline, from the lock alone. Exit codes: 0 ok, 2 bad input.",
    )
    p.add_argument("--invert", metavar="NAME", help="draw what requires NAME instead")
    _profile_args(p)
    p.set_defaults(func=cmd_tree)

    p = sub.add_parser(
        "export",
        help="the lock as hashed pins another installer uses (requirements.txt or pylock)",
        description="Write the profile's lock as pins any installer can use from a checkout: "
        "--format requirements-txt (name==version --hash=sha256:..., for pip "
        "--require-hashes) or --format pylock (PEP 751 with each wheel's URL). Protected and "
        "host-provided packages are left out, with a comment naming them; the native wheel "
        "is exported by its pinned source. Exit codes: 0 ok, 2 bad input.",
    )
    p.add_argument(
        "--format",
        required=True,
        choices=("requirements-txt", "pylock"),
        help="requirements-txt or pylock",
    )
    p.add_argument("--output", "-o", metavar="FILE", help="write FILE (default: stdout)")
    p.add_argument(
        "--urls",
        action="store_true",
        help="requirements-txt: write each wheel's URL (from the page cache or the index)",
    )
    p.add_argument("--no-native", action="store_true", help="leave the native wheel out")
    p.add_argument("--index-url", help="the main index, where wheel URLs are looked up")
    p.add_argument("--extra-index-url", action="append", default=[], metavar="URL")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL")
    p.add_argument("--no-index", action="store_true", help="use only --find-links")
    p.add_argument("--offline", action="store_true", help="use only the page cache")
    p.add_argument("--cache-dir", help="cache directory (default: user cache)")
    p.add_argument("--profile", "-p", metavar="PROFILE", help="profile name or .toml path")
    p.set_defaults(func=cmd_export)


def _profile_args(p: Any) -> None:
    p.add_argument("--profile", "-p", metavar="PROFILE", help="profile name or .toml path")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _read(profile: str | None) -> tuple[Any, Any]:
    """The profile and its lock (a :class:`LockError` naming the fix when it has none)."""
    from kvenv.errors import LockError
    from kvenv.lock.pylock import read_lock
    from kvenv.model.loading import load_profile

    loaded = load_profile(profile)
    path = loaded.lock_path
    if not path.is_file():
        raise LockError(
            f"no lock file at {path}",
            hint=f"create it with `kvenv lock {loaded.profile.name}`",
        )
    return loaded, read_lock(path)


def _graph(loaded: Any, lock: Any) -> Any:
    """The lock's graph, markers evaluated for the profile's target, host versions from its
    recorded snapshot when it has one."""
    from packaging.markers import InvalidMarker, Marker

    from kvenv.lock.graph import from_lock
    from kvenv.model.loading import recorded_host
    from kvenv.model.target import TargetEnv

    target = loaded.profile.target
    env = TargetEnv.from_profile_target(target, file=str(loaded.path)) if target else None

    def evaluate(marker: str | None, extras: frozenset[str]) -> bool:
        if marker is None or env is None:
            return True
        try:
            return env.evaluate(Marker(marker), extras)
        except InvalidMarker:
            return False

    host: dict[str, str] = {}
    snapshot = recorded_host(loaded).snapshot
    if snapshot is not None:
        host = {str(d.name): str(d.version) for d in snapshot.distributions if d.version}
    declared = [str(r) for r in loaded.profile.overlay.requires]
    return from_lock(lock, evaluate=evaluate, host_versions=host, declared=declared)


def _known(graph: Any, name: str) -> str:
    """``name`` normalised, if the graph has it; else a :class:`UsageError` naming the closest."""
    import difflib

    from packaging.utils import canonicalize_name

    from kvenv.errors import UsageError

    key = canonicalize_name(name)
    if key in graph.nodes:
        return str(key)
    near = difflib.get_close_matches(key, graph.names(), n=5, cutoff=0.6)
    raise UsageError(
        f"{name} is not in the lock (neither locked, nor a host package or a waiver it relies on)",
        hint=("closest: " + ", ".join(near)) if near else "`kvenv tree` lists every package",
    )


def cmd_why(args: argparse.Namespace) -> int:
    from kvenv.lock.graph import chains

    loaded, lock = _read(args.profile)
    graph = _graph(loaded, lock)
    name = _known(graph, args.name)
    found, truncated = chains(graph, name)
    node = graph.nodes[name]
    if args.json:
        emit_json(
            {
                "name": name,
                "version": node.version,
                "kind": node.kind,
                "lock": str(lock.path),
                "chains": [[_edge_json(graph, e) for e in chain] for chain in found],
                "truncated": truncated,
            }
        )
        return EXIT_OK
    count = len(found)
    out(f"{node.label()}: {count} chain{'' if count == 1 else 's'} from the profile's roots")
    for chain in found:
        out("  " + _chain_text(graph, chain))
    if truncated:
        out("  ... more chains left out")
    if not found:
        out("  (nothing requires it: it is in the lock but unreachable; relock to drop it)")
    return EXIT_OK


def _edge_json(graph: Any, edge: Any) -> dict[str, Any]:
    node = graph.nodes[edge.child]
    return {
        "name": node.name,
        "version": node.version,
        "kind": node.kind,
        "requirement": edge.requirement,
        "via": edge.kind,
    }


def _chain_text(graph: Any, chain: list[Any]) -> str:
    """``root -> a 1.0 (requires b>=2) -> b 2.1``: each step with the requirement taken."""
    parts: list[str] = []
    for index, edge in enumerate(chain):
        label = graph.nodes[edge.child].label()
        if index == 0:
            parts.append(
                label if edge.kind == "native" else f"{label} [declared: {edge.requirement}]"
            )
        else:
            parts.append(f"{label} [{edge.requirement}]")
    return " -> ".join(parts)


def cmd_tree(args: argparse.Namespace) -> int:
    from kvenv.lock.graph import tree

    loaded, lock = _read(args.profile)
    graph = _graph(loaded, lock)
    invert = _known(graph, args.invert) if args.invert else None
    drawn = tree(graph, invert=invert)
    if args.json:
        emit_json(
            {
                "lock": str(lock.path),
                "inverted": invert is not None,
                "tree": [t.to_json() for t in drawn],
            }
        )
        return EXIT_OK
    for top in drawn:
        _draw(top, "", "", top=True)
    return EXIT_OK


def _draw(item: Any, lead: str, branch: str, *, top: bool = False) -> None:
    node, edge = item.node, item.edge
    text = node.label()
    if edge is not None and not top:
        text += f" [{edge.requirement}]" if edge.kind != "native" else ""
    elif edge is not None and edge.kind == "declared":
        text += f" [declared: {edge.requirement}]"
    if item.inverted and item.roots:
        text += " <- the profile (" + ", ".join(item.roots) + ")"
    if item.repeated:
        text += " (*)"
    out(f"{lead}{branch}{text}")
    children = item.children
    for index, child in enumerate(children):
        last = index == len(children) - 1
        inner = lead + ("" if top else ("    " if branch.startswith("└") else "│   "))
        _draw(child, inner, "└── " if last else "├── ")


def _left_out(graph: Any) -> list[Any]:
    """The host packages the lock relies on (protected ones flagged), for the export's note."""
    from kvenv.fetch.export import LeftOut

    return [
        LeftOut(node.name, node.version, node.protected)
        for node in graph.nodes.values()
        if node.kind == "host"
    ]


def _locator(args: argparse.Namespace) -> Any:
    """A :class:`kvenv.fetch.locate.Locator` on this command's indexes and the lock's page
    cache (``--offline``: the cached pages only)."""
    from kvenv.cli.lock import _cache_dir, _index_flags
    from kvenv.fetch.locate import Locator
    from kvenv.lock.cache import IndexCache
    from kvenv.lock.sources import index_config
    from kvenv.model.locations import default_cache_dir

    config = index_config(**_index_flags(args))
    cache = IndexCache(_cache_dir(args.cache_dir) or default_cache_dir())
    return Locator(config.index_urls(), config.find_links, cache, offline=args.offline)


def cmd_export(args: argparse.Namespace) -> int:
    from kvenv._util import atomic
    from kvenv.fetch.export import export_pylock, export_requirements, native_location

    loaded, lock = _read(args.profile)
    graph = _graph(loaded, lock)
    native = loaded.profile.native
    pinned = native_location(native.source if native else None, loaded.resolve)
    output = Path(args.output).absolute() if args.output else None
    if (
        args.format == "pylock"
        and output is not None
        and not (
            output.name == "pylock.toml"
            or (output.name.startswith("pylock.") and output.name.endswith(".toml"))
        )
    ):
        from kvenv.errors import UsageError

        raise UsageError(
            f"a PEP 751 lock is named pylock.toml or pylock.NAME.toml, not {output.name}",
            hint=f"-o pylock.{loaded.profile.name}.toml",
        )
    locator = _locator(args)
    try:
        if args.format == "requirements-txt":
            text = export_requirements(
                lock,
                profile=loaded.profile.name,
                left_out=_left_out(graph),
                native=pinned,
                project_dir=loaded.base_dir,
                locate=locator.locate,
                urls=args.urls,
                include_native=not args.no_native,
            )
        else:
            text = export_pylock(
                lock,
                profile=loaded.profile.name,
                output_dir=output.parent if output is not None else Path.cwd(),
                left_out=_left_out(graph),
                native=pinned,
                locate=locator.locate,
                include_native=not args.no_native,
            )
    finally:
        locator.close()
    if output is None:
        out(text.rstrip("\n"))
    else:
        atomic.write_text(output, text)
        out(f"wrote {output}")
    return EXIT_OK
