"""The cluster's verdict from its nodes' results: pure, no Ray, no I/O.

- :func:`plan_gate`: ``apply`` installs on no node unless every node plans cleanly; with
  ``allow_partial`` it goes on with the nodes that did and skips the rest.
- :func:`odd_nodes`: the nodes whose generation digest is not the majority's (all of the
  groups when no digest has a strict majority).
- :func:`judge`: the whole report: every node's row, the problems (each naming its node, the
  difference and the fix) and whether the command succeeded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from kvenv.cluster.ops import ClusterAction, NodeResult

# What each action counts as a success on a node.
_GOOD: dict[ClusterAction, frozenset[str]] = {
    "status": frozenset({"ok", "nothing"}),
    "plan": frozenset({"ready", "up-to-date"}),
    "apply": frozenset({"applied", "up-to-date"}),
    "verify": frozenset({"ok"}),
}


@attrs.frozen
class NodeProblem:
    node: str  # "ADDRESS NODEID8"
    message: str
    fix: str | None = None


@attrs.frozen
class ClusterReport:
    action: ClusterAction
    nodes: tuple[NodeResult, ...]
    problems: tuple[NodeProblem, ...]
    ok: bool
    summary: str
    odd: tuple[str, ...] = ()  # labels of the nodes whose generation differs

    def to_json(self) -> dict[str, object]:
        return {
            "action": self.action,
            "ok": self.ok,
            "summary": self.summary,
            "nodes": [n.to_json() for n in self.nodes],
            "problems": [attrs.asdict(p) for p in self.problems],
            "odd_nodes": list(self.odd),
        }


def label(result: NodeResult) -> str:
    return f"{result.address} {result.node_id[:8]}".strip()


def plan_gate(
    plans: Sequence[NodeResult], *, allow_partial: bool
) -> tuple[list[NodeResult], list[NodeResult]]:
    """(the nodes to apply on, the nodes that did not plan cleanly). Without
    ``allow_partial`` the first list is empty as soon as the second is not."""
    good = [p for p in plans if p.verdict in _GOOD["plan"]]
    bad = [p for p in plans if p.verdict not in _GOOD["plan"]]
    if bad and not allow_partial:
        return [], bad
    return good, bad


def odd_nodes(results: Sequence[NodeResult]) -> list[NodeResult]:
    """The nodes whose generation digest differs from the majority's; a node with nothing
    applied counts as its own digest. No strict majority: every node is odd."""
    if len(results) < 2:
        return []
    counts = Counter(r.digest for r in results)
    (top, top_count), *rest = counts.most_common()
    if rest and rest[0][1] == top_count:
        return list(results) if len(counts) > 1 else []
    return [r for r in results if r.digest != top]


def _findings(result: NodeResult) -> list[NodeProblem]:
    out = [
        NodeProblem(label(result), f.message, f.fix)
        for f in result.findings
        if f.status != "warning"
    ]
    if not out and result.detail:
        out.append(NodeProblem(label(result), result.detail))
    return out


def _fix_for(action: ClusterAction, result: NodeResult) -> str | None:
    if result.verdict == "died":
        return "the node's task died; its previous generation is intact: run the command again"
    if result.verdict == "nothing":
        return "run `kvenv cluster apply` first"
    if result.verdict == "drift":
        return "repair it: `kvenv cluster apply --repair`"
    return None


def judge(
    action: ClusterAction,
    results: Sequence[NodeResult],
) -> ClusterReport:
    """The cluster's report for ``action`` over every node's result."""
    rows = list(results)
    problems: list[NodeProblem] = []
    bad = [r for r in results if r.verdict not in _GOOD[action]]
    for result in bad:
        found = _findings(result)
        fix = _fix_for(action, result)
        if not found:
            found = [NodeProblem(label(result), f"{result.verdict} on this node", fix)]
        problems += [attrs.evolve(p, fix=p.fix or fix) for p in found]
    odd: list[NodeResult] = []
    if action in ("verify", "status") and not bad:
        odd = odd_nodes(results)
        for node in odd:
            problems.append(
                NodeProblem(
                    label(node),
                    f"runs generation {node.generation or 'none'} ({node.digest or 'nothing'}),"
                    " not the one the other nodes run",
                    "run `kvenv cluster apply` with the same bundle on every node",
                )
            )
    # status reports; it fails only when a node could not answer
    ok = (not bad) if action == "status" else (not problems and bool(results))
    return ClusterReport(
        action=action,
        nodes=tuple(rows),
        problems=tuple(problems),
        ok=ok,
        summary=_summary(action, rows, ok, odd),
        odd=tuple(label(n) for n in odd),
    )


def refused(plans: Sequence[NodeResult]) -> ClusterReport:
    """The report of an apply that installed nowhere because some node did not plan cleanly."""
    bad = [p for p in plans if p.verdict not in _GOOD["plan"]]
    problems = [
        attrs.evolve(p, fix=p.fix or "use a profile made for this node, or --allow-partial")
        for result in bad
        for p in (_findings(result) or [NodeProblem(label(result), f"{result.verdict}")])
    ]
    names = ", ".join(label(b) for b in bad)
    return ClusterReport(
        action="apply",
        nodes=tuple(plans),
        problems=tuple(problems),
        ok=False,
        summary=f"nothing was applied on any node: {len(bad)} node(s) did not plan cleanly "
        f"({names})",
    )


def _summary(
    action: ClusterAction, rows: Sequence[NodeResult], ok: bool, odd: Sequence[object]
) -> str:
    counts = Counter(r.verdict for r in rows)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    same = ""
    if action in ("verify", "status") and ok and rows and rows[0].digest:
        same = f"; every node runs {rows[0].digest[:19]}"
    if odd:
        same = f"; {len(odd)} node(s) run another generation"
    return f"{len(rows)} node(s): {parts}{same}"


__all__ = [
    "ClusterReport",
    "NodeProblem",
    "judge",
    "label",
    "odd_nodes",
    "plan_gate",
    "refused",
]
