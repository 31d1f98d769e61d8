"""``kvenv cluster status|plan|apply|verify`` as functions: connect to the cluster, run the
node's side (:mod:`kvenv.cluster.ops`) on every alive node, and judge the results
(:mod:`kvenv.cluster.report`). Returns a :class:`~kvenv.cluster.report.ClusterReport`; only
``kvenv.cli.cluster`` prints it.

``apply``: the bundle is shipped once (or named as a shared path), every node plans (receiving
the bundle on the way); unless every node plans cleanly (or ``allow_partial``), nothing is
applied anywhere; then every chosen node applies at the same time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from kvenv.cluster.nodes import Node, alive_nodes, connect, on_each
from kvenv.cluster.ops import ClusterAction, NodeResult, NodeSpec, run_node
from kvenv.cluster.report import ClusterReport, judge, plan_gate, refused


@attrs.frozen
class ClusterOptions:
    address: str
    profile: str | None = None
    root: str | None = None
    cache: str | None = None
    bundle: str | None = None  # a bundle directory on this machine
    shared: bool = False  # every node reads ``bundle`` at the same path (else it is shipped)
    strict: bool = False
    repair: bool = False
    offline: bool = False  # apply: no network on any node (each node's cache or the bundle)
    allow_partial: bool = False
    jobs: int = 8


def failed_result(action: ClusterAction) -> Any:
    def failed(node: Node, verdict: str, reason: str) -> NodeResult:
        return NodeResult(
            node_id=node.node_id,
            address=node.address,
            hostname=node.hostname,
            action=action,
            verdict="died" if verdict == "died" else "error",
            detail=reason,
        )

    return failed


def _spec(action: ClusterAction, options: ClusterOptions, ray: Any) -> NodeSpec:
    shipped = None
    if options.bundle is not None and not options.shared:
        from kvenv.cluster.ship import ship_bundle

        shipped = ship_bundle(ray, Path(options.bundle))
    shared = str(Path(options.bundle).absolute()) if options.bundle and options.shared else None
    return NodeSpec(
        action=action,
        profile=options.profile,
        root=options.root,
        cache=options.cache,
        strict=options.strict,
        repair=options.repair,
        offline=options.offline,
        shared_bundle=shared,
        shipped=shipped,
        jobs=options.jobs,
    )


def run_on_nodes(ray: Any, nodes: list[Node], spec: NodeSpec) -> list[NodeResult]:
    results: list[NodeResult] = on_each(
        ray, nodes, run_node, spec, failed=failed_result(spec.action)
    )
    return results


def run_action(action: ClusterAction, options: ClusterOptions) -> ClusterReport:
    """Run ``action`` on every alive node of the cluster at ``options.address`` (this process
    connects, and disconnects before returning)."""
    ray = connect(options.address)
    try:
        return _run_action(ray, action, options)
    finally:
        ray.shutdown()


def _run_action(ray: Any, action: ClusterAction, options: ClusterOptions) -> ClusterReport:
    nodes = alive_nodes(ray)
    if action != "apply":
        # Only plan needs the bundle (its profile); status and verify read each node's root.
        given = options if action == "plan" else attrs.evolve(options, bundle=None)
        return judge(action, run_on_nodes(ray, nodes, _spec(action, given, ray)))
    spec = _spec("plan", options, ray)
    plans = run_on_nodes(ray, nodes, spec)
    chosen, bad = plan_gate(plans, allow_partial=options.allow_partial)
    if not chosen and bad:
        return refused(plans)
    by_id = {p.node_id for p in chosen}
    targets = [n for n in nodes if n.node_id in by_id]
    results = run_on_nodes(ray, targets, attrs.evolve(spec, action="apply"))
    return judge("apply", results + [attrs.evolve(b, action="apply") for b in bad])
