"""The cluster's verdict from its nodes' results (pure)."""

from __future__ import annotations

from kvenv.cluster.ops import NodeFinding, NodeResult
from kvenv.cluster.report import judge, odd_nodes, plan_gate, refused


def _node(n: int, verdict: str, digest: str | None = "sha256:a", **kw: object) -> NodeResult:
    return NodeResult(
        node_id=f"{n:08d}" + "f" * 48,
        address=f"10.0.0.{n}",
        hostname=f"h{n}",
        action="verify",
        verdict=verdict,  # type: ignore[arg-type]
        digest=digest,
        generation="g" if digest else None,
        **kw,  # type: ignore[arg-type]
    )


def test_plan_gate_applies_nowhere_unless_every_node_plans_cleanly() -> None:
    plans = [_node(1, "ready"), _node(2, "refused"), _node(3, "up-to-date")]
    assert plan_gate(plans, allow_partial=False) == ([], [plans[1]])
    assert plan_gate(plans, allow_partial=True) == ([plans[0], plans[2]], [plans[1]])
    assert plan_gate(plans[::2], allow_partial=False) == ([plans[0], plans[2]], [])


def test_refused_names_the_node_its_difference_and_the_fix() -> None:
    bad = _node(
        2,
        "refused",
        findings=(NodeFinding("error", "torch CUDA: expected 12.8; found 12.4", "use cu124"),),
    )
    report = refused([_node(1, "ready"), bad])
    assert not report.ok
    assert "nothing was applied on any node" in report.summary
    assert [(p.node, p.message, p.fix) for p in report.problems] == [
        ("10.0.0.2 00000002", "torch CUDA: expected 12.8; found 12.4", "use cu124")
    ]


def test_odd_nodes_are_the_minority_digests_or_all_on_a_tie() -> None:
    a, b, c = _node(1, "ok", "sha256:x"), _node(2, "ok", "sha256:x"), _node(3, "ok", "sha256:y")
    assert odd_nodes([a, b, c]) == [c]
    assert odd_nodes([a, c]) == [a, c]
    assert odd_nodes([a, b]) == []
    assert odd_nodes([a]) == []


def test_verify_fails_on_differing_digests_naming_the_odd_node() -> None:
    report = judge("verify", [_node(1, "ok"), _node(2, "ok"), _node(3, "ok", "sha256:b")])
    assert not report.ok
    assert report.odd == ("10.0.0.3 00000003",)
    assert [p.node for p in report.problems] == ["10.0.0.3 00000003"]
    assert judge("verify", [_node(1, "ok"), _node(2, "ok")]).ok


def test_a_died_node_is_named_with_the_rerun_fix() -> None:
    died = _node(2, "died", None, detail="WorkerCrashedError: gone")
    report = judge("apply", [_node(1, "applied"), died])
    assert not report.ok
    (problem,) = report.problems
    assert problem.node == "10.0.0.2 00000002" and "WorkerCrashedError" in problem.message
    assert problem.fix is not None and "run the command again" in problem.fix


def test_status_reports_differences_without_failing() -> None:
    report = judge("status", [_node(1, "ok"), _node(2, "nothing", None)])
    assert report.ok
    assert report.odd == ("10.0.0.1 00000001", "10.0.0.2 00000002")
