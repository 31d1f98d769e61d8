"""``kvenv cluster`` and the runtime on a real local Ray cluster of two nodes (``ray start``
twice, separate temp dirs, each node with its own ``KVENV_ROOT`` and cache), inside a network
namespace with only loopback up: every node's address is 127.0.0.1 and no traffic leaves the
machine. The cluster is started once for the module (:mod:`tests.cluster.scenario` runs the
whole story in the namespace and records it); each test checks one part of the story.

Skipped, with the reason, where Ray is not installed or namespaces cannot be made.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.scenario import prepare
from tests.support.paths import REPO

pytestmark = pytest.mark.ray


def _namespaces() -> str | None:
    """Why the namespace cannot be made here, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare(1) and ip(8)"
    probe = subprocess.run(
        ["unshare", "-rn", "--pid", "--fork", "--mount", "--mount-proc", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"user/network/PID namespaces are unavailable: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    why = _namespaces()
    if why is not None:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("cluster")
    prepare(work)
    done = subprocess.run(
        [
            "unshare",
            "-rn",
            "--pid",
            "--fork",
            "--mount",
            "--mount-proc",
            "--",
            sys.executable,
            "-m",
            "tests.cluster.scenario",
            str(work),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    results_file = work / "results.json"
    assert results_file.exists(), done.stderr[-4000:]
    results: dict[str, Any] = json.loads(results_file.read_text())
    assert "crashed" not in results, results.get("crashed")
    results["work"] = str(work)
    return results


def _nodes(step: dict[str, Any]) -> list[dict[str, Any]]:
    assert step["json"] is not None, step["stderr"][-3000:]
    nodes: list[dict[str, Any]] = step["json"]["nodes"]
    return nodes


def _by_root(step: dict[str, Any], work: str) -> dict[str, dict[str, Any]]:
    """Each node's row by the name of its root (a, b); a node whose task died reports no
    root: it is the one left."""
    named = {Path(n["root"]).name.removeprefix("root-"): n for n in _nodes(step) if n["root"]}
    rest = [n for n in _nodes(step) if not n["root"]]
    for name in ("a", "b"):
        if name not in named and rest:
            named[name] = rest.pop()
    return named


def test_the_nodes_live_on_loopback_only(story: dict[str, Any]) -> None:
    lines = [line for line in story["interfaces"].splitlines() if " inet" in line]
    assert lines and all(" lo " in line for line in lines), story["interfaces"]
    nodes = _nodes(story["status-empty"])
    assert len(nodes) == 2
    assert {n["address"] for n in nodes} == {"127.0.0.1"}
    assert len({n["node_id"] for n in nodes}) == 2
    assert {n["verdict"] for n in nodes} == {"nothing"}


def test_every_ray_process_started_was_stopped_by_pid(story: dict[str, Any]) -> None:
    assert story["pids"]["a"] and story["pids"]["b"]
    assert set(story["pids"]["a"]) & set(story["stopped"])  # the head's daemons, by pid
    assert story["left"] == []  # no process of any node is left


def test_cluster_plan_runs_on_every_node_with_its_own_root(story: dict[str, Any]) -> None:
    step = story["plan"]
    assert step["code"] == 0, step["stderr"]
    nodes = _by_root(step, story["work"])
    assert set(nodes) == {"a", "b"}
    assert {n["verdict"] for n in nodes.values()} == {"ready"}


def test_cluster_apply_from_a_shipped_bundle_applies_everywhere_then_is_idempotent(
    story: dict[str, Any],
) -> None:
    step = story["apply"]
    assert step["code"] == 0, step["stderr"]
    nodes = _by_root(step, story["work"])
    assert {n["verdict"] for n in nodes.values()} == {"applied"}
    assert nodes["a"]["generation"] and nodes["b"]["generation"]
    assert nodes["a"]["digest"] == nodes["b"]["digest"]
    # Each node received the bundle into its own cache, through the object store.
    for name in ("a", "b"):
        received = list((Path(story["work"]) / f"cache-{name}" / "cluster-bundles").iterdir())
        assert len(received) == 1 and (received[0] / "SHA256SUMS").is_file()
    text = story["apply-text"]
    assert text["code"] == 0, text["stderr"]
    rows = [line for line in text["stdout"].splitlines() if line.startswith("127.0.0.1 ")]
    assert len(rows) == 2 and all(" up-to-date " in row for row in rows), text["stdout"]
    assert "NODE" in text["stdout"] and "GENERATION" in text["stdout"]


def test_ray_workers_on_every_node_import_the_overlay_through_the_runtime_env(
    story: dict[str, Any],
) -> None:
    step = story["overlay"]
    assert step["code"] == 0, step["stderr"]
    data = step["json"]
    env_vars = data["runtime_env"]["env_vars"]
    assert env_vars["KVENV_DEMO"] == "1"
    assert env_vars["KVENV_CLUSTER_GENERATION"] == _nodes(story["apply"])[0]["digest"]
    assert (
        data["runtime_env"]["worker_process_setup_hook"] == "kvenv.cluster.workers.activate_worker"
    )
    workers = data["workers"]
    assert len(workers) == 2
    for worker in workers:
        assert worker["V"] == "helper-2.0"
        assert worker["KVENV_DEMO"] == "1"
        # each node imports from its own root's current generation
        assert Path(worker["file"]).is_relative_to(worker["root"]), worker
    assert {Path(w["root"]).name for w in workers} == {"root-a", "root-b"}


def test_cluster_verify_passes_then_names_the_tampered_node(story: dict[str, Any]) -> None:
    step = story["verify"]
    assert step["code"] == 0, step["stderr"]
    assert step["json"]["ok"] is True
    bad = story["verify-tampered"]
    assert bad["code"] == 1
    nodes = _by_root(bad, story["work"])
    assert nodes["a"]["verdict"] == "ok"
    assert nodes["b"]["verdict"] == "drift"
    b_label = f"127.0.0.1 {nodes['b']['node_id'][:8]}"
    problems = bad["json"]["problems"]
    assert problems and {p["node"] for p in problems} == {b_label}
    assert any("differs from its RECORD" in p["message"] for p in problems)
    repaired = story["repair"]
    assert repaired["code"] == 0, repaired["stderr"]
    assert story["verify-repaired"]["code"] == 0


def test_a_node_whose_host_does_not_fit_is_refused_and_nothing_is_applied(
    story: dict[str, Any],
) -> None:
    if story["older-python"] is None:
        pytest.skip("no interpreter older than this one on the machine to play a different host")
    step = story["apply-refused"]
    assert step["code"] == 3, step["stderr"]
    data = step["json"]
    assert data["ok"] is False
    assert "nothing was applied on any node" in data["summary"]
    nodes = _by_root(step, story["work"])
    assert nodes["a"]["verdict"] == "ready"
    assert nodes["b"]["verdict"] == "refused"
    messages = [p["message"] for p in data["problems"]]
    assert any("Python version" in m for m in messages), messages
    assert {p["node"] for p in data["problems"]} == {f"127.0.0.1 {nodes['b']['node_id'][:8]}"}
    assert story["generations-after-refused"] == story["generations-before"]


def test_a_node_killed_mid_apply_keeps_its_generation_and_a_rerun_converges(
    story: dict[str, Any],
) -> None:
    step = story["apply-killed"]
    assert step["code"] == 1, step["stderr"]
    nodes = _by_root(step, story["work"])
    assert nodes["a"]["verdict"] == "applied"
    assert nodes["b"]["verdict"] == "died"
    problems = step["json"]["problems"]
    assert {p["node"] for p in problems} == {f"127.0.0.1 {nodes['b']['node_id'][:8]}"}
    before, after = story["generations-before"], story["generations-after-kill"]
    assert after["b"]["pointer"] == before["b"]["pointer"]  # b's previous generation is current
    assert after["a"]["pointer"] != before["a"]["pointer"]
    # The runtime refuses to start on a cluster whose nodes differ, naming the odd node.
    refused = story["overlay-odd"]
    assert refused["code"] != 0 and refused["json"] is None
    assert "do not run the driver's generation" in refused["stderr"]
    assert f"127.0.0.1 {nodes['b']['node_id'][:8]}" in refused["stderr"]
    odd = story["verify-after-kill"]
    assert odd["code"] == 1
    assert odd["json"]["odd_nodes"] and len(odd["json"]["odd_nodes"]) == 2  # 1 vs 1: both named
    rerun = story["apply-rerun"]
    assert rerun["code"] == 0, rerun["stderr"]
    verdicts = {k: n["verdict"] for k, n in _by_root(rerun, story["work"]).items()}
    assert verdicts == {"a": "up-to-date", "b": "applied"}
    final = story["verify-final"]
    assert final["code"] == 0, final["stderr"]
    digests = {n["digest"] for n in _nodes(final)}
    assert len(digests) == 1 and digests != {n["digest"] for n in _nodes(story["verify"])}


def test_llm_on_ray_checks_the_cluster_and_hands_workers_the_activation(
    story: dict[str, Any],
) -> None:
    step = story["llm"]
    assert step["code"] == 0, step["stderr"]
    data = step["json"]
    # TP × PP is checked against the whole cluster's GPUs (none here), before vLLM starts.
    assert "requires 2 GPUs; the Ray cluster has 0" in data["gpu_error"]
    assert data["initialized_after_refusal"] is False
    env_vars = data["runtime_env"]["env_vars"]
    assert env_vars["KVENV_CLUSTER_GENERATION"] == _nodes(story["apply"])[0]["digest"]
    assert data["engine"]["distributed_executor_backend"] == "ray"
    roots = sorted(Path(f).parts[-6] for f in data["workers"])
    assert roots == ["root-a", "root-b"], data["workers"]


def test_serve_on_ray_gives_vllm_the_executor_and_the_job_runtime_env(
    story: dict[str, Any],
) -> None:
    step = story["serve"]
    assert step["code"] == 0, step["stderr"]
    data = step["json"]
    argv = data["argv"]
    cut = argv.index("--distributed-executor-backend")
    assert argv[cut + 1] == "ray"
    assert data["env"]["RAY_ADDRESS"] == "127.0.0.1:6390"
    job = json.loads(data["env"]["RAY_JOB_CONFIG_JSON_ENV_VAR"])
    hook = job["runtime_env"]["worker_process_setup_hook"]
    assert hook == "kvenv.cluster.workers.activate_worker"
    digest = _nodes(story["apply"])[0]["digest"]
    assert job["runtime_env"]["env_vars"]["KVENV_CLUSTER_GENERATION"] == digest
    refused = story["serve-gpus"]
    assert refused["code"] == 2
    assert "the Ray cluster has 0" in refused["json"]["message"]
