"""What one node's task does: kvenv's own plan, apply, status and verify, on that node, against
that node's runtime root, returning a :class:`NodeResult` (never raising for kvenv's errors:
a node's failure is a row of the cluster's report, not the end of the command).

Everything here runs inside a Ray worker on the node. The runtime root and cache are resolved
on the node as ``kvenv apply`` resolves them there (``--root``/``--cache`` when the driver was
given them, else the node's ``$KVENV_ROOT``/``$KVENV_CACHE_DIR`` as set when its ``ray start``
ran, else the profile's ``[paths]``, else the default). The host interpreter is the node's
``$KVENV_PYTHON`` when set, else the interpreter Ray's workers run (the one vLLM's workers will
run). The profile comes from the bundle when there is one, else by name or path on the node.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from kvenv.errors import KvenvError

if TYPE_CHECKING:
    from kvenv.cluster.ship import ShippedBundle
    from kvenv.env.manifest import Manifest
    from kvenv.fetch.bundle import BundleInfo
    from kvenv.model.loading import LoadedProfile
    from kvenv.model.locations import Locations
    from kvenv.model.snapshot import HostSnapshot
    from kvenv.plan.make import Plan

ClusterAction = Literal["status", "plan", "apply", "verify"]
Verdict = Literal[
    "ready",  # plan: compatible, would apply
    "up-to-date",  # plan/apply: the applied generation matches
    "applied",  # apply: a new generation is current
    "refused",  # plan/apply: the host does not fit the profile (errors name the difference)
    "ok",  # verify: every file matches; status: something is applied
    "drift",  # verify: files, host packages or activation differ
    "nothing",  # status/verify: nothing applied on this node
    "error",  # kvenv refused for another reason (bad input, integrity, conflict)
    "died",  # the node's task or worker died (set by the driver)
]


@attrs.frozen
class NodeFinding:
    status: str  # "error", "warning", "drift", ...
    message: str
    fix: str | None = None


@attrs.frozen
class NodeSpec:
    """What every node's task is given (no secret ever travels here: tokens stay in each
    node's environment)."""

    action: ClusterAction
    profile: str | None = None
    root: str | None = None
    cache: str | None = None
    strict: bool = False
    repair: bool = False
    offline: bool = False  # apply: no download, as `kvenv apply --offline`
    shared_bundle: str | None = None
    shipped: ShippedBundle | None = None
    jobs: int = 8


@attrs.frozen
class NodeResult:
    node_id: str
    address: str
    hostname: str
    action: ClusterAction
    verdict: Verdict
    root: str | None = None
    generation: str | None = None
    digest: str | None = None  # kvenv.cluster.identity.generation_digest of the current one
    findings: tuple[NodeFinding, ...] = ()
    detail: str = ""
    seconds: float = 0.0
    python: str | None = None

    def to_json(self) -> dict[str, object]:
        data = attrs.asdict(self)
        data["findings"] = [attrs.asdict(f) for f in self.findings]
        return data


def _node_identity() -> tuple[str, str]:
    """(node id, address) of the node this task runs on; ("", hostname) outside Ray."""
    try:
        ray: Any = importlib.import_module("ray")
        context = ray.get_runtime_context()
        return context.get_node_id(), ray.util.get_node_ip_address()
    except Exception:  # not in a Ray worker (direct calls in tests and tools)
        return "", socket.gethostname()


def _host_python() -> str:
    return os.environ.get("KVENV_PYTHON") or sys.executable


def _host(python: str) -> HostSnapshot:
    from kvenv.probe.host import take_snapshot

    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return take_snapshot()
    return take_snapshot(python=python)


def _bundle(spec: NodeSpec, cache: Path) -> BundleInfo | None:
    if spec.shipped is not None:
        from kvenv.cluster.ship import receive_bundle

        return receive_bundle(importlib.import_module("ray"), spec.shipped, cache)
    if spec.shared_bundle is not None:
        from kvenv.cluster.ship import shared_bundle

        return shared_bundle(Path(spec.shared_bundle))
    return None


def node_cache(cache: str | None) -> Path:
    """The node's cache before any profile is known: ``--cache``, else ``$KVENV_CACHE_DIR``,
    else the user cache directory (where received bundles are kept)."""
    from kvenv.model.locations import default_cache_dir, given_path

    return given_path(cache, "--cache") if cache else default_cache_dir()


def cluster_profile(profile: str | None, cache: str | None) -> str | None:
    """The profile as this node knows it: the bundle it last received for that name (or its
    one received bundle when no name is given), else ``profile`` as ``kvenv`` resolves it."""
    from kvenv.cluster.ship import received_profile

    found = received_profile(node_cache(cache), profile)
    return str(found) if found is not None else profile


def _load(spec: NodeSpec) -> tuple[LoadedProfile, Locations, BundleInfo | None]:
    from kvenv.env.place import find_place

    bundle = _bundle(spec, node_cache(spec.cache))
    if bundle is not None and spec.profile is None:
        profile: str | None = str(bundle.profile_path)
    else:
        profile = cluster_profile(spec.profile, spec.cache)
    place = find_place(profile, root=spec.root, cache=spec.cache)
    return place.loaded, place.locations, bundle


def _plan(loaded: LoadedProfile, locations: Locations, spec: NodeSpec, python: str) -> Plan:
    from kvenv.env.apply import plan_apply
    from kvenv.lock.input import profile_lock
    from kvenv.model.loading import recorded_host

    return plan_apply(
        loaded,
        profile_lock(loaded),
        _host(python),
        locations,
        strict=spec.strict,
        recorded=recorded_host(loaded).snapshot,
        repair=spec.repair,
    )


def _current(locations: Locations) -> Manifest | None:
    """The manifest of the generation applied on this node now, or None."""
    from kvenv.env.root import current_manifest, is_owned

    return current_manifest(locations.root) if is_owned(locations.root) else None


def _result(
    verdict: Verdict,
    locations: Locations,
    base: dict[str, Any],
    manifest: Manifest | None = None,
    **fields: Any,
) -> NodeResult:
    """A result naming the node's root and, with ``manifest``, its generation and digest."""
    from kvenv.cluster.identity import generation_digest

    return NodeResult(
        verdict=verdict,
        root=str(locations.root),
        generation=manifest.generation if manifest is not None else None,
        digest=generation_digest(manifest) if manifest is not None else None,
        **fields,
        **base,
    )


def _plan_findings(plan: Plan) -> tuple[NodeFinding, ...]:
    return tuple(
        NodeFinding(f.status, f.message, f.fix)
        for f in plan.findings
        if f.status in ("error", "warning")
    )


def run_node(spec: NodeSpec) -> NodeResult:
    """Run ``spec.action`` on this node; kvenv's errors become a result with verdict error."""
    node_id, address = _node_identity()
    started = time.monotonic()
    python = _host_python()
    base: dict[str, Any] = {
        "node_id": node_id,
        "address": address,
        "hostname": socket.gethostname(),
        "action": spec.action,
        "python": python,
    }
    try:
        result = _ACTIONS[spec.action](spec, python, base)
    except KvenvError as error:
        result = NodeResult(
            verdict="error",
            findings=tuple(NodeFinding("error", p.render(), None) for p in error.problems),
            detail=error.render(),
            **base,
        )
    return attrs.evolve(result, seconds=round(time.monotonic() - started, 3))


def _status(spec: NodeSpec, python: str, base: dict[str, Any]) -> NodeResult:
    _, locations, _ = _load(spec)
    manifest = _current(locations)
    return _result(
        "ok" if manifest and manifest.generation else "nothing", locations, base, manifest
    )


def _do_plan(spec: NodeSpec, python: str, base: dict[str, Any]) -> NodeResult:
    loaded, locations, _ = _load(spec)
    plan = _plan(loaded, locations, spec, python)
    verdict: Verdict = (
        "refused"
        if not plan.compatible
        else "up-to-date"
        if (plan.up_to_date and not spec.repair)
        else "ready"
    )
    return _result(
        verdict,
        locations,
        base,
        _current(locations),
        findings=_plan_findings(plan),
        detail=f"{sum(1 for s in plan.steps if not s.done)} step(s) to do",
    )


def _do_apply(spec: NodeSpec, python: str, base: dict[str, Any]) -> NodeResult:
    from kvenv.env.apply import ApplyOptions, apply

    loaded, locations, bundle = _load(spec)
    plan = _plan(loaded, locations, spec, python)
    if not plan.compatible:
        return _result(
            "refused",
            locations,
            base,
            _current(locations),
            findings=_plan_findings(plan),
            detail="nothing was changed on this node",
        )
    result = apply(
        plan,
        ApplyOptions(
            offline=spec.offline or bundle is not None,
            bundle=bundle,
            jobs=spec.jobs,
            python=python,
            repair=spec.repair,
        ),
    )
    return _result(
        "up-to-date" if result.status == "up-to-date" else "applied",
        locations,
        base,
        _current(locations),
        findings=tuple(NodeFinding("warning", w) for w in result.warnings),
    )


def _do_verify(spec: NodeSpec, python: str, base: dict[str, Any]) -> NodeResult:
    from kvenv.env.integrity import state_damage
    from kvenv.env.root import check_owner, is_owned, owner_of
    from kvenv.env.verify import verify, verify_activation

    loaded, locations, _ = _load(spec)
    if not is_owned(locations.root):
        return _result("nothing", locations, base)
    check_owner(locations.root, owner_of(loaded))
    manifest, damage = state_damage(locations)
    if damage:
        findings = tuple(NodeFinding(d.kind, d.message) for d in damage)
        return _result("drift", locations, base, findings=findings)
    if manifest is None:
        return _result("nothing", locations, base)
    host = _host(python)
    drifts = verify(manifest, host, locations=locations, jobs=spec.jobs)
    drifts += verify_activation(manifest, loaded, host)
    findings = tuple(NodeFinding(d.kind, d.message) for d in drifts[:50])
    return _result("drift" if drifts else "ok", locations, base, manifest, findings=findings)


_ACTIONS = {"status": _status, "plan": _do_plan, "apply": _do_apply, "verify": _do_verify}
