"""``kvenv cluster status|plan|apply|verify``: the same verified environment on every node of
an existing Ray cluster (kvenv's ``ray`` extra). Ray is imported only when one of these
commands runs, never by ``kvenv --help`` or any other command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from kvenv.cli._io import emit_json, err, out
from kvenv.cli.exitcodes import EXIT_CHECK_FAILED, EXIT_CONFLICT, EXIT_OK

if TYPE_CHECKING:
    from kvenv.cluster.driver import ClusterOptions
    from kvenv.cluster.report import ClusterReport

_HELP = {
    "status": "each node's current generation (and whether they agree)",
    "plan": "plan on every node (receiving the bundle); names the nodes that do not fit",
    "apply": "apply on every node at once, only if every node plans cleanly",
    "verify": "verify on every node; fails when a node drifted or runs another generation",
}


def register(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster",
        help="status/plan/apply/verify on every node of a Ray cluster (needs the ray extra)",
        description="Run kvenv's own status, plan, apply or verify on every alive node of an "
        "existing Ray cluster (one task pinned to each node) and print one row per node. "
        "Exit 0 ok, 1 a node failed or differs, 2 bad input, 3 a node does not fit "
        "(nothing applied anywhere).",
    )
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    for action, help_text in _HELP.items():
        p = actions.add_parser(action, help=help_text, description=help_text)
        p.add_argument("profile", nargs="?", metavar="PROFILE", help="name or .toml")
        p.add_argument(
            "--address",
            required=True,
            metavar="ADDR",
            help="the Ray head's HOST:PORT (a private network only: Ray's traffic is unencrypted)",
        )
        p.add_argument(
            "--root",
            metavar="DIR",
            help="the runtime root on every node (default: each node's $KVENV_ROOT as set "
            "when its `ray start` ran, else the profile's [paths], else the default)",
        )
        p.add_argument(
            "--cache", metavar="DIR", help="the cache on every node (default: each node's)"
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if action in ("plan", "apply"):
            p.add_argument(
                "--from",
                dest="bundle",
                metavar="BUNDLE",
                help="a bundle on this machine: shipped to every node through Ray's object "
                "store, checked by sha256 on arrival",
            )
            p.add_argument(
                "--shared",
                action="store_true",
                help="every node reads --from at the same path (shared storage): ship nothing",
            )
            p.add_argument("--strict", action="store_true", help="turn warnings into errors")
            p.add_argument("--repair", action="store_true", help="as `kvenv apply --repair`")
        if action == "apply":
            p.add_argument(
                "--offline",
                action="store_true",
                help="no network on any node: each node's cache or the bundle only "
                "(as `kvenv apply --offline`)",
            )
            p.add_argument(
                "--allow-partial",
                action="store_true",
                help="apply on the nodes that plan cleanly even when others do not",
            )
        p.set_defaults(func=cmd_cluster)


def cluster_options(args: argparse.Namespace) -> ClusterOptions:
    """The driver's options from a parsed ``kvenv cluster ACTION`` command line."""
    from kvenv.cluster.driver import ClusterOptions
    from kvenv.errors import UsageError

    if getattr(args, "shared", False) and not args.bundle:
        raise UsageError("--shared needs --from BUNDLE (the path every node reads)")
    return ClusterOptions(
        address=args.address,
        profile=args.profile,
        root=args.root,
        cache=args.cache,
        bundle=getattr(args, "bundle", None),
        shared=getattr(args, "shared", False),
        strict=getattr(args, "strict", False),
        repair=getattr(args, "repair", False),
        offline=getattr(args, "offline", False),
        allow_partial=getattr(args, "allow_partial", False),
    )


def cmd_cluster(args: argparse.Namespace) -> int:
    from kvenv.cluster.driver import run_action

    options = cluster_options(args)
    # Ray's own messages (a worker that died, ...) go to stderr: stdout is the report.
    with contextlib.redirect_stdout(sys.stderr):
        report = run_action(args.cluster_action, options)
    if args.json:
        emit_json(report.to_json())
    else:
        render_report(report)
    if report.ok:
        return EXIT_OK
    refused = any(n.verdict == "refused" for n in report.nodes)
    return EXIT_CONFLICT if refused else EXIT_CHECK_FAILED


def render_report(report: ClusterReport) -> None:
    """One row per node: node, host verdict, generation, digest, time; then the problems."""
    from kvenv.cluster.report import label

    rows = [("NODE", "HOST", "VERDICT", "GENERATION", "DIGEST", "TIME")]
    for node in report.nodes:
        rows.append(
            (
                label(node),
                node.hostname,
                node.verdict,
                node.generation or "-",
                (node.digest or "-")[:19],
                f"{node.seconds:.1f}s",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for problem in report.problems:
        fix = f" (fix: {problem.fix})" if problem.fix else ""
        err(f"{problem.node}: {problem.message}{fix}")
    for node in report.nodes:
        for finding in node.findings:
            if finding.status == "warning":
                err(f"warning: {label(node)}: {finding.message}")
    out(f"{report.action}: {report.summary}")
