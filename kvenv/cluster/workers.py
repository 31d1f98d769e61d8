"""The runtime on Ray: every node that will host a worker runs the same generation, and Ray's
workers import the overlay, not whatever the node's Python has.

The driver (``kvenv.runtime.LLM(..., distributed_executor_backend="ray")`` or ``kvenv serve
--ray``) takes the generation applied on its own machine as the reference
(:func:`local_generation`), asks every alive node for its current generation
(:func:`check_same_generation`: a ``status`` task pinned to each node) and refuses to start
unless every digest is the reference's, naming the odd nodes. It then hands the job a
``runtime_env`` (:func:`runtime_env_for`) whose ``env_vars`` carry the manifest's activation
variables (the profile's ``[runtime.env]``), the reference digest and where each node finds its
generation, and whose ``worker_process_setup_hook`` is :func:`activate_worker`: in every Ray
worker process, before any task, it reads that node's current manifest, refuses a digest other
than the reference, and activates it (``sys.path`` and ``os.environ``: ``PYTHONPATH``,
``PATH``, ``LD_LIBRARY_PATH`` from that node's manifest, since each node's generation lives in
its own root). TP × PP is checked against the GPUs of the whole cluster
(:func:`check_cluster_gpus`).

``kvenv serve --ray`` starts ``vllm serve`` as a child: the same ``runtime_env`` reaches the
child's ``ray.init`` through Ray's job config variable (:func:`job_environment`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from kvenv.errors import CheckFailed, Problem, RuntimeNotReady, UsageError

SETUP_HOOK = "kvenv.cluster.workers.activate_worker"
EXPECT_ENV = "KVENV_CLUSTER_GENERATION"  # the generation digest every worker must find
PROFILE_ENV = "KVENV_CLUSTER_PROFILE"  # the profile whose root each node reads
ROOT_ENV = "KVENV_CLUSTER_ROOT"  # set only when the driver names one root for every node
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # Ray reads a job's runtime_env from it


def local_generation(profile: str | None, root: str | None = None) -> tuple[str, dict[str, str]]:
    """(digest, activation env) of the generation applied on this machine for ``profile``."""
    from kvenv.cluster.identity import generation_digest
    from kvenv.cluster.ops import cluster_profile
    from kvenv.env.place import find_place
    from kvenv.env.root import current_manifest

    place = find_place(cluster_profile(profile, None), root=root)
    loaded, locations = place.loaded, place.locations
    place.check_owner()
    manifest = current_manifest(locations.root)
    if manifest is None:
        raise RuntimeNotReady(
            f"nothing is applied for profile {loaded.profile.name} in {locations.root} "
            "on this machine (the driver)",
            hint="apply the same bundle on every node: `kvenv cluster apply --from BUNDLE "
            "--address ADDR`",
        )
    return generation_digest(manifest), dict(manifest.activation.env)


def runtime_env_for(
    digest: str, profile: str | None, env: dict[str, str], root: str | None = None
) -> dict[str, Any]:
    """The job's ``runtime_env``: the activation's variables, the reference digest, and the
    setup hook that activates each node's own generation in every worker."""
    env_vars = dict(env)
    env_vars[EXPECT_ENV] = digest
    if profile is not None:
        env_vars[PROFILE_ENV] = profile
    if root is not None:
        env_vars[ROOT_ENV] = root
    return {"env_vars": env_vars, "worker_process_setup_hook": SETUP_HOOK}


def activate_worker() -> None:
    """Ray's ``worker_process_setup_hook``: activate this node's current generation in this
    worker, after checking it is the one the driver expects."""
    from kvenv.cluster.identity import generation_digest
    from kvenv.env.activation import activate_in_process
    from kvenv.env.manifest import read_manifest
    from kvenv.env.place import find_place

    expected = os.environ.get(EXPECT_ENV)
    from kvenv.cluster.ops import cluster_profile

    profile = cluster_profile(os.environ.get(PROFILE_ENV) or None, None)
    place = find_place(profile, root=os.environ.get(ROOT_ENV) or None)
    locations = place.locations
    path = place.current_manifest_path()
    if path is None:
        raise RuntimeNotReady(
            f"nothing is applied in {locations.root} on this node",
            hint="run `kvenv cluster apply` before starting the job",
        )
    found = generation_digest(read_manifest(path, root=locations.root))
    if expected and found != expected:
        raise RuntimeNotReady(
            f"this node runs generation {found}, the driver expects {expected}",
            hint="run `kvenv cluster apply` with the same bundle on every node",
        )
    activate_in_process(manifest=path)


def check_same_generation(
    ray: Any, digest: str, profile: str | None, root: str | None = None
) -> list[str]:
    """Every alive node's current generation against ``digest``; refuse naming the odd ones.
    Returns the nodes' labels."""
    from kvenv.cluster.driver import run_on_nodes
    from kvenv.cluster.nodes import alive_nodes
    from kvenv.cluster.ops import NodeSpec
    from kvenv.cluster.report import label

    nodes = alive_nodes(ray)
    results = run_on_nodes(ray, nodes, NodeSpec(action="status", profile=profile, root=root))
    odd = [r for r in results if r.verdict != "ok" or r.digest != digest]
    if odd:
        raise CheckFailed(
            f"{len(odd)} of {len(results)} node(s) do not run the driver's generation "
            f"({digest}); vLLM was not started",
            problems=[
                Problem(
                    f"{label(r)}: "
                    + (
                        f"runs {r.generation} ({r.digest})"
                        if r.verdict == "ok"
                        else r.detail or f"{r.verdict}"
                    ),
                    fix="run `kvenv cluster apply` with the same bundle on every node",
                )
                for r in odd
            ],
        )
    return [label(r) for r in results]


def check_cluster_gpus(ray: Any, tensor_parallel_size: int, pipeline_parallel_size: int) -> None:
    """TP × PP against the GPUs of the whole cluster, per node (the same guard as one node's)."""
    from kvenv.cluster.nodes import alive_nodes

    nodes = alive_nodes(ray)
    need = tensor_parallel_size * pipeline_parallel_size
    have = sum(int(n.gpus) for n in nodes)
    if need > have:
        per_node = ", ".join(f"{n.label}: {int(n.gpus)}" for n in nodes)
        raise UsageError(
            f"tensor_parallel_size={tensor_parallel_size} × pipeline_parallel_size="
            f"{pipeline_parallel_size} requires {need} GPUs; the Ray cluster has {have} "
            f"({per_node})",
            hint="lower the parallel sizes, or add nodes with GPUs to the cluster",
        )


def _checked(
    address: str,
    profile: str | None,
    root: str | None,
    parallel: Sequence[int] | None,
) -> dict[str, Any]:
    """Check the cluster from a plain connection (no setup hook: a node that differs is named,
    not left failing to start workers) and return the job's ``runtime_env``."""
    from kvenv.cluster.nodes import connect

    digest, env = local_generation(profile, root)
    ray = connect(address)
    try:
        check_same_generation(ray, digest, profile, root)
        if parallel is not None:
            check_cluster_gpus(ray, *parallel)
    finally:
        ray.shutdown()
    return runtime_env_for(digest, profile, env, root)


def prepare_ray(
    address: str,
    profile: str | None,
    *,
    root: str | None = None,
    parallel: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Before vLLM starts on Ray: check every node runs this machine's generation and
    (``parallel`` = (TP, PP)) the cluster has the GPUs, then connect this process with the
    activation's ``runtime_env`` (vLLM's Ray executor reuses the connection). Returns the
    ``runtime_env``."""
    from kvenv.cluster.nodes import connect

    runtime_env = _checked(address, profile, root, parallel)
    connect(address, runtime_env=runtime_env)
    return runtime_env


def job_environment(
    address: str,
    profile: str | None,
    *,
    root: str | None = None,
    parallel: Sequence[int] | None = None,
) -> dict[str, str]:
    """For a child that runs its own ``ray.init`` (``vllm serve``): check as
    :func:`prepare_ray` does, and return the variables that give the child the cluster's
    address and the job's ``runtime_env``."""
    runtime_env = _checked(address, profile, root, parallel)
    return {"RAY_ADDRESS": address, JOB_CONFIG_ENV: json.dumps({"runtime_env": runtime_env})}
