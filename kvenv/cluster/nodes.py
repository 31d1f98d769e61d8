"""The driver's side of Ray: connect, list the alive nodes, run one task pinned to each.

Ray is imported here, and only here and in :mod:`kvenv.cluster.workers` (both reached only
from ``kvenv cluster`` and the Ray runtime). Each task is pinned with
``NodeAffinitySchedulingStrategy(node_id, soft=False)``: it runs on that node or fails, never
elsewhere. Tasks take no CPU slot (``num_cpus=0``: kvenv's work must not wait behind a model's
workers) and are never retried by Ray (``max_retries=0``): an apply that died is reported as
died, and the user's rerun finishes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from kvenv.errors import RuntimeNotReady, UsageError


@attrs.frozen
class Node:
    node_id: str
    address: str
    hostname: str
    gpus: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.address} {self.node_id[:8]}"


def import_ray() -> Any:
    """The ``ray`` module, or a clear error naming the extra to install."""
    try:
        return importlib.import_module("ray")
    except ModuleNotFoundError as exc:
        if exc.name != "ray":
            raise
        raise RuntimeNotReady(
            "Ray is not installed: `kvenv cluster` and the Ray runtime need it",
            hint="install kvenv's `ray` extra on every node (from a checkout: "
            "pip install '.[ray]'; see the README for other ways)",
        ) from None


def connect(address: str, *, runtime_env: dict[str, Any] | None = None) -> Any:
    """Connect this process to the existing Ray cluster at ``address`` (``HOST:PORT`` of the
    head's GCS, or ``auto``); returns the ``ray`` module."""
    if not address or not address.strip():
        raise UsageError("--address must name the Ray head (HOST:PORT), got an empty value")
    ray = import_ray()
    if ray.is_initialized():
        return ray
    try:
        ray.init(
            address=address,
            runtime_env=runtime_env,
            log_to_driver=False,
            logging_level="ERROR",
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(
            f"cannot connect to the Ray cluster at {address}: {exc}",
            hint="start the head with `ray start --head`, and pass its HOST:PORT to --address",
        ) from None
    return ray


def alive_nodes(ray: Any) -> list[Node]:
    """The cluster's alive nodes, in a stable order (address, then id)."""
    nodes = [
        Node(
            node_id=str(n["NodeID"]),
            address=str(n.get("NodeManagerAddress", "")),
            hostname=str(n.get("NodeManagerHostname", "")),
            gpus=float(n.get("Resources", {}).get("GPU", 0.0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    ]
    if not nodes:
        raise RuntimeNotReady("the Ray cluster has no alive node")
    return sorted(nodes, key=lambda n: (n.address, n.node_id))


def on_each(
    ray: Any,
    nodes: Sequence[Node],
    function: Callable[..., Any],
    argument: Any,
    *,
    failed: Callable[[Node, str, str], Any],
    runtime_env: dict[str, Any] | None = None,
) -> list[Any]:
    """Run ``function(argument)`` once on every node, all at once; the results in ``nodes``'
    order. A task that failed in Ray (its worker or node died, it could not be scheduled)
    becomes ``failed(node, verdict, reason)``: verdict ``error`` when the function raised,
    ``died`` when its worker or node died or it could not run there."""
    strategies = importlib.import_module("ray.util.scheduling_strategies")
    remote = ray.remote(function)
    refs = []
    for node in nodes:
        options: dict[str, Any] = {
            "num_cpus": 0,
            "max_retries": 0,
            "scheduling_strategy": strategies.NodeAffinitySchedulingStrategy(
                node.node_id, soft=False
            ),
        }
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        refs.append(remote.options(**options).remote(argument))
    results = []
    for node, ref in zip(nodes, refs, strict=True):
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayTaskError as exc:
            results.append(failed(node, "error", _reason(exc)))
        except ray.exceptions.RayError as exc:
            results.append(failed(node, "died", _reason(exc)))
    return results


def _reason(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    text = first[0] if first else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
