"""``kvenv cluster apply`` across 2 and 3 local Ray nodes against applying on each node in turn,
and the cost of shipping a bundle through Ray's object store, per GB.

Everything runs inside a user, network and PID namespace with only loopback up (the script
re-executes itself under ``unshare -rn --pid --fork --mount --mount-proc``), like the tests in
``tests/cluster``: the nodes are ``ray start`` processes on this one machine, each with its own
runtime root and cache (fresh for every measurement), all at 127.0.0.1.

- **cluster**: one ``kvenv cluster apply --from BUNDLE`` (ships the bundle, plans on every
  node, applies on every node at the same time), wall seconds of the command.
- **in turn**: ``kvenv apply --from BUNDLE --root R_i --cache C_i`` once per node, one after
  the other (what applying by hand on each node costs, less the ssh), wall seconds summed.
- **ship**: :func:`kvenv.cluster.ship.ship_bundle` of a bundle holding one large wheel (the
  driver puts every chunk), then :func:`kvenv.cluster.ship.receive_bundle` on another node
  (fetches, checks each chunk and file, re-opens the bundle), seconds per GB for each half.

The nodes share this machine's CPUs and disk, so the parallel apply cannot beat one apply's
cost by more than the cores allow; on separate machines each node's work is its own.

Usage::

    python benchmarks/cluster.py [--nodes 2 3] [--overlay-mb 48] [--ship-mb 256]
        [--rounds 2] [--out benchmarks/results/cluster.json]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

INSIDE = "KVENV_BENCH_NAMESPACE"


def _random_text(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


def _bundle(work: Path, name: str, overlay_mb: int, wheels: int = 4) -> Path:
    """A bundle: the test native wheel and ``wheels`` overlay wheels of incompressible files
    (``overlay_mb`` MB in all, 64 files each), targeting this interpreter."""
    from kvenv.fetch.bundle import make_bundle
    from tests.support.applyenv import native_wheel, write_project
    from tests.support.wheels import build_wheel

    project = work / f"project-{name}"
    wheel_dir = project / "wheels"
    per_file = max(1, overlay_mb * 1024 * 1024 // (wheels * 64))
    overlay = [
        build_wheel(
            wheel_dir,
            f"payload{i}",
            "1.0",
            files={f"payload{i}/data{j}.txt": _random_text(per_file) for j in range(64)},
        )
        for i in range(wheels)
    ]
    version = ".".join(str(p) for p in sys.version_info[:3])
    target = f'[target]\npython = "{version}"\nimplementation = "cpython"\nabi = "none"\n'
    loaded = write_project(
        project,
        native=native_wheel(wheel_dir),
        overlay=overlay,
        name=name,
        allow_pth=(),
        target=target,
    ).loaded()
    out = work / f"bundle-{name}"
    make_bundle(loaded, out, cache=work / "make-cache")
    return out


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return elapsed


def _apply_round(nodes: int, bundle: Path, base: Path) -> dict[str, float]:
    from tests.cluster.scenario import ADDRESS, Cluster, _env

    work = Path(tempfile.mkdtemp(prefix=f"n{nodes}-", dir=base))
    cluster = Cluster(work)
    try:
        names = "abcdefgh"[:nodes]
        cluster.start(names[0], head=True)
        for name in names[1:]:
            cluster.start(name)
        cluster.wait_alive(nodes)
        python = sys.executable
        parallel = _timed(
            [
                python,
                "-m",
                "kvenv",
                "cluster",
                "apply",
                "--from",
                str(bundle),
                "--address",
                ADDRESS,
            ],
            _env(),
        )
    finally:
        cluster.stop()
    in_turn = 0.0
    for i in range(nodes):
        in_turn += _timed(
            [
                python,
                "-m",
                "kvenv",
                "apply",
                "--from",
                str(bundle),
                "--root",
                str(work / f"seq-root-{i}"),
                "--cache",
                str(work / f"seq-cache-{i}"),
            ],
            _env(),
        )
    return {"cluster_s": parallel, "in_turn_s": in_turn}


SHIP = """
import json, sys, time
from pathlib import Path
from kvenv.cluster.nodes import alive_nodes, connect
from kvenv.cluster.ship import receive_bundle, ship_bundle

ray = connect(sys.argv[1])
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

here = ray.get_runtime_context().get_node_id()
other = next(n for n in alive_nodes(ray) if n.node_id != here)
started = time.perf_counter()
shipped = ship_bundle(ray, Path(sys.argv[2]))
put = time.perf_counter() - started

def receive(shipped, cache):
    import ray, time
    started = time.perf_counter()
    receive_bundle(ray, shipped, Path(cache))
    return time.perf_counter() - started

task = ray.remote(receive).options(
    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(other.node_id, soft=False)
)
started = time.perf_counter()
inside = ray.get(task.remote(shipped, sys.argv[3]))
total = time.perf_counter() - started
print("RESULT " + json.dumps({"bytes": shipped.size, "put_s": put, "receive_s": total,
                              "receive_in_task_s": inside}))
"""


def _ship_round(bundle: Path, base: Path) -> dict[str, float]:
    from tests.cluster.scenario import ADDRESS, Cluster, _env

    work = Path(tempfile.mkdtemp(prefix="ship-", dir=base))
    cluster = Cluster(work, object_store=600_000_000)
    try:
        cluster.start("a", head=True)
        cluster.start("b")
        cluster.wait_alive(2)
        done = subprocess.run(
            [sys.executable, "-c", SHIP, ADDRESS, str(bundle), str(work / "received")],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        cluster.stop()
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"shipping failed:\n{done.stdout}\n{done.stderr}")
    data: dict[str, float] = json.loads(lines[-1][7:])
    return data


def run(args: argparse.Namespace) -> dict[str, Any]:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    base = Path(tempfile.mkdtemp(prefix="kvb", dir="/tmp"))
    bundle = _bundle(base, "bench", args.overlay_mb)
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    results: dict[str, Any] = {
        "bundle_bytes": size,
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "apply": {},
    }
    for nodes in args.nodes:
        rounds = [_apply_round(nodes, bundle, base) for _ in range(args.rounds)]
        cluster = statistics.median(r["cluster_s"] for r in rounds)
        in_turn = statistics.median(r["in_turn_s"] for r in rounds)
        results["apply"][str(nodes)] = {
            "rounds": rounds,
            "cluster_s": round(cluster, 2),
            "in_turn_s": round(in_turn, 2),
            "in_turn_over_cluster": round(in_turn / cluster, 2),
        }
        print(
            f"{nodes} nodes: cluster apply {cluster:.2f} s, in turn {in_turn:.2f} s "
            f"(ratio {in_turn / cluster:.2f})",
            file=sys.stderr,
        )
    big = _bundle(base, "ship", args.ship_mb, wheels=1)
    ship = [_ship_round(big, base) for _ in range(args.rounds)]
    gb = ship[0]["bytes"] / 1e9
    results["ship"] = {
        "rounds": ship,
        "bytes": ship[0]["bytes"],
        "put_s_per_gb": round(statistics.median(r["put_s"] for r in ship) / gb, 2),
        "receive_s_per_gb": round(statistics.median(r["receive_s"] for r in ship) / gb, 2),
    }
    print(
        f"ship: put {results['ship']['put_s_per_gb']} s/GB, receive "
        f"{results['ship']['receive_s_per_gb']} s/GB",
        file=sys.stderr,
    )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--overlay-mb", type=int, default=48)
    parser.add_argument("--ship-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/cluster.json")
    args = parser.parse_args()
    if os.environ.get(INSIDE) != "1":
        namespace = ["unshare", "-rn", "--pid", "--fork", "--mount", "--mount-proc", "--"]
        env = {**os.environ, INSIDE: "1"}
        return subprocess.run([*namespace, sys.executable, *sys.argv], env=env).returncode
    results = run(args)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
