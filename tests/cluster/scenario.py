"""The body of the Ray cluster tests, run inside a network namespace of its own with only
loopback up (and a PID namespace, so nothing it starts can outlive it): start a head and a
worker node with ``ray start`` (separate temp dirs, each with its own ``KVENV_ROOT`` and cache,
standing in for separate disks), run ``kvenv cluster`` and the Ray runtime against them, and
write what happened to ``results.json``. Every Ray process it started is stopped by its pid.

``python -m tests.cluster.scenario --prepare WORKDIR`` makes ``bundle-v1`` and ``bundle-v2``
beforehand, outside (there is no package index in the namespace); then
``python -m tests.cluster.scenario WORKDIR`` runs inside ``unshare -rn --pid --fork --mount
--mount-proc``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PORT = 6390
ADDRESS = f"127.0.0.1:{PORT}"
BIN = Path(sys.executable).parent
NODE_ENV = "KVENV_TEST_RAY_NODE"  # tags every process of a node, so it can be stopped by pid


RAY_HOME = tempfile.mkdtemp(prefix="kvenv-ray-home-")
atexit.register(shutil.rmtree, RAY_HOME, True)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "RAY_"))}
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # a home of the cluster's own: a token the machine's user keeps (~/.ray/auth_token) is
    # not this cluster's, and with it a joining node cannot join a head that expects none
    env["HOME"] = RAY_HOME
    env.update(extra or {})
    return env


class Cluster:
    def __init__(self, work: Path, *, object_store: int = 100_000_000) -> None:
        self.work = work
        self.object_store = object_store
        self.tmp = Path(tempfile.mkdtemp(prefix="kvr", dir="/tmp"))  # short: socket paths
        self.nodes: dict[str, dict[str, str]] = {}

    def node_env(self, name: str) -> dict[str, str]:
        return {
            NODE_ENV: name,
            "KVENV_ROOT": str(self.work / f"root-{name}"),
            "KVENV_CACHE_DIR": str(self.work / f"cache-{name}"),
        }

    def start(self, name: str, *, head: bool = False, **extra: str) -> None:
        temp = self.tmp / name
        temp.mkdir(exist_ok=True)
        argv = [
            str(BIN / "ray"),
            "start",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f"--temp-dir={temp}",
            f"--object-store-memory={self.object_store}",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={52500 + len(self.nodes) + (10 if head else 0)}",
        ]
        argv += (
            ["--head", f"--port={PORT}", "--include-dashboard=false"]
            if head
            else [f"--address={ADDRESS}"]
        )
        env = _env({**self.node_env(name), **extra})
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=120)
        self.nodes[name] = env

    def pids(self, name: str | None = None) -> list[int]:
        """The pids of the node's processes (every tagged process when ``name`` is None)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            tags = [e for e in environ if e.startswith(NODE_ENV.encode() + b"=")]
            if tags and (name is None or tags[0] == f"{NODE_ENV}={name}".encode()):
                found.append(int(entry))
        return found

    def stop(self, name: str | None = None) -> list[int]:
        pids = self.pids(name)
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self._alive(pids):
                time.sleep(0.2)
            if not self._alive(pids):
                break
        if name is not None:
            self.nodes.pop(name, None)
        return pids

    @staticmethod
    def _alive(pids: list[int]) -> bool:
        alive = False
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # we are PID 1 here: reap what was reparented
            try:
                state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            except OSError:
                continue
            alive = alive or state != "Z"
        return alive

    def wait_alive(self, count: int) -> None:
        code = (
            "import ray,time,sys\n"
            f"ray.init(address={ADDRESS!r}, log_to_driver=False, logging_level='ERROR')\n"
            "deadline = time.monotonic() + 90\n"
            "while time.monotonic() < deadline:\n"
            f"    if sum(1 for n in ray.nodes() if n['Alive']) == {count}: sys.exit(0)\n"
            "    time.sleep(0.5)\n"
            "sys.exit(1)\n"
        )
        subprocess.run([sys.executable, "-c", code], env=_env(), check=True, timeout=120)


def kvenv(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "kvenv", *args],
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        data = json.loads(done.stdout) if "--json" in args else None
    except json.JSONDecodeError:
        data = None
    return {"code": done.returncode, "json": data, "stdout": done.stdout, "stderr": done.stderr}


OVERLAY_DRIVER = """
import json, os, sys
from kvenv.cluster.workers import prepare_ray
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kvenv.errors import KvenvError

try:
    runtime_env = prepare_ray(sys.argv[1], sys.argv[2])
except KvenvError as error:
    sys.exit(error.render())

def where():
    import helper
    return {
        "file": helper.__file__,
        "V": helper.V,
        "root": os.environ.get("KVENV_ROOT"),
        "KVENV_DEMO": os.environ.get("KVENV_DEMO"),
        "active": os.environ.get("KVENV_ACTIVE"),
    }

task = ray.remote(where)
nodes = [n for n in ray.nodes() if n["Alive"]]
refs = [
    task.options(
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
    ).remote()
    for n in nodes
]
print("RESULT " + json.dumps({"runtime_env": runtime_env, "workers": ray.get(refs)}))
"""


LLM_DRIVER = """
import json, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from kvenv.errors import KvenvError
from kvenv.runtime import LLM

out = {}
try:
    LLM("m", profile="demo", distributed_executor_backend="ray", ray_address=sys.argv[1],
        tensor_parallel_size=2)
except KvenvError as error:
    out["gpu_error"] = error.render()
out["initialized_after_refusal"] = ray.is_initialized()
llm = LLM("m", profile="demo", distributed_executor_backend="ray", ray_address=sys.argv[1],
          validate_gpus=False)
out["runtime_env"] = llm.ray_runtime_env
out["engine"] = llm.engine_kwargs

def where():
    import helper
    return helper.__file__

task = ray.remote(where)
refs = [
    task.options(
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
    ).remote()
    for n in ray.nodes()
    if n["Alive"]
]
out["workers"] = ray.get(refs)
print("RESULT " + json.dumps(out))
"""


def _driver(code: str, root: str, *args: str, pythonpath: str | None = None) -> dict[str, Any]:
    """Run the driver script ``code`` (its argv: the cluster's address, then ``args``) with
    kvenv's root and cache at ``root``; its exit code, its ``RESULT`` JSON and output tails."""
    extra = {"KVENV_ROOT": root, "KVENV_CACHE_DIR": root.replace("root-", "cache-")}
    if pythonpath:
        extra["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        [sys.executable, "-c", code, ADDRESS, *args],
        env=_env(extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        data = json.loads(_result_line(done.stdout))
    except (json.JSONDecodeError, IndexError):
        data = None
    return {
        "code": done.returncode,
        "json": data,
        "stdout": done.stdout[-3000:],
        "stderr": done.stderr[-3000:],
    }


def _result_line(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith("RESULT ")][-1][7:]


def overlay(profile: str, root: str) -> dict[str, Any]:
    return _driver(OVERLAY_DRIVER, root, profile)


def older_python() -> str | None:
    """Another interpreter on this machine whose version is lower than ours (a node whose host
    does not fit a profile that targets at least our version), if there is one."""
    for candidate in ("/usr/bin/python3", "/usr/bin/python3.11", "/usr/local/bin/python3"):
        if not os.path.isfile(candidate):
            continue
        out = subprocess.run(
            [candidate, "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True,
            text=True,
        )
        version = tuple(int(x) for x in out.stdout.split()) if out.returncode == 0 else ()
        if version and version < tuple(sys.version_info[:3]):
            return candidate
    return None


def run(work: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    results["interfaces"] = subprocess.run(
        ["ip", "-o", "addr"], capture_output=True, text=True
    ).stdout
    v1, v2 = str(work / "bundle-v1"), str(work / "bundle-v2")
    profile = "demo"  # by name: each node uses the bundle it received for it
    cluster = Cluster(work)
    started: list[int] = []
    try:
        cluster.start("a", head=True)
        cluster.start("b")
        cluster.wait_alive(2)
        results["pids"] = {"a": cluster.pids("a"), "b": cluster.pids("b")}
        results["status-empty"] = kvenv(
            "cluster", "status", profile, "--address", ADDRESS, "--json"
        )
        results["plan"] = kvenv("cluster", "plan", "--from", v1, "--address", ADDRESS, "--json")
        results["apply"] = kvenv("cluster", "apply", "--from", v1, "--address", ADDRESS, "--json")
        results["apply-text"] = kvenv("cluster", "apply", "--from", v1, "--address", ADDRESS)
        root_a = str(work / "root-a")
        results["overlay"] = overlay(profile, root_a)
        results["llm"] = _driver(
            LLM_DRIVER, root_a, pythonpath=str(Path(__file__).parent.parent / "fake_vllm")
        )
        # --dry-run runs every check of a start, the executable's too: demo has no vllm
        serve = ("serve", "m", "--profile", "demo", "--ray", ADDRESS, "--dry-run", "--json")
        serve += ("--vllm", sys.executable)
        cache_a = {"KVENV_ROOT": root_a, "KVENV_CACHE_DIR": str(work / "cache-a")}
        results["serve"] = kvenv(*serve, "--no-gpu-check", env=cache_a)
        results["serve-gpus"] = kvenv(*serve, env=cache_a)
        results["verify"] = kvenv("cluster", "verify", profile, "--address", ADDRESS, "--json")
        # Tamper with node b's generation: an installed file of the overlay.
        target = _helper_file(work / "root-b")
        results["tampered"] = str(target)
        os.chmod(target, 0o644)
        target.write_text(target.read_text() + "\nTAMPERED = True\n")
        results["verify-tampered"] = kvenv(
            "cluster", "verify", profile, "--address", ADDRESS, "--json"
        )
        results["repair"] = kvenv(
            "cluster", "apply", "--from", v1, "--repair", "--address", ADDRESS, "--json"
        )
        results["verify-repaired"] = kvenv(
            "cluster", "verify", profile, "--address", ADDRESS, "--json"
        )
        results["generations-before"] = _generations(work)
        # A node whose host does not fit: another interpreter on node b.
        other = older_python()
        results["older-python"] = other
        if other is not None:
            cluster.stop("b")
            cluster.wait_alive(1)
            cluster.start("b", KVENV_PYTHON=other)
            cluster.wait_alive(2)
            results["apply-refused"] = kvenv(
                "cluster", "apply", "--from", v2, "--address", ADDRESS, "--json"
            )
            results["generations-after-refused"] = _generations(work)
        # Node b's apply dies (SIGKILL) mid-apply, before the switch.
        cluster.stop("b")
        cluster.wait_alive(1)
        cluster.start("b", KVENV_TEST_KILL_AT="install-overlay")
        cluster.wait_alive(2)
        results["apply-killed"] = kvenv(
            "cluster", "apply", "--from", v2, "--address", ADDRESS, "--json"
        )
        results["generations-after-kill"] = _generations(work)
        results["overlay-odd"] = overlay(profile, str(work / "root-a"))
        results["verify-after-kill"] = kvenv(
            "cluster", "verify", profile, "--address", ADDRESS, "--json"
        )
        cluster.stop("b")
        cluster.wait_alive(1)
        cluster.start("b")
        cluster.wait_alive(2)
        results["apply-rerun"] = kvenv(
            "cluster", "apply", "--from", v2, "--address", ADDRESS, "--json"
        )
        results["verify-final"] = kvenv(
            "cluster", "verify", profile, "--address", ADDRESS, "--json"
        )
        results["generations-final"] = _generations(work)
    finally:
        started = cluster.stop()
        results["stopped"] = started
        results["left"] = cluster.pids()
    return results


def _pointer(root: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((root / "current.json").read_text())
    except FileNotFoundError:
        return None
    return data


def _generations(work: Path) -> dict[str, Any]:
    return {
        name: {
            "pointer": _pointer(work / f"root-{name}"),
            "dirs": sorted(p.name for p in (work / f"root-{name}" / "generations").iterdir())
            if (work / f"root-{name}" / "generations").is_dir()
            else [],
        }
        for name in ("a", "b")
    }


def _helper_file(root: Path) -> Path:
    pointer = _pointer(root)
    assert pointer is not None
    manifest = json.loads(
        (root / "generations" / pointer["generation"] / "manifest.json").read_text()
    )
    return Path(manifest["dirs"]["overlay"]) / "helper" / "__init__.py"


def prepare(work: Path) -> None:
    """Make the bundles (outside the namespace): the demo's shape, a native wheel and a
    one-package overlay (``helper``), from local wheels, with a pure-Python target of at least
    this interpreter's version; v2 changes the overlay's version."""
    from kvenv.fetch.bundle import make_bundle
    from tests.support.applyenv import helper_wheel, native_wheel, write_project

    version = ".".join(str(p) for p in sys.version_info[:3])
    target = f'[target]\npython = "{version}"\nimplementation = "cpython"\nabi = "none"\n'
    for name, helper in (("v1", "2.0"), ("v2", "2.1")):
        project_dir = work / f"project-{name}"
        wheels = project_dir / "wheels"
        project = write_project(
            project_dir,
            native=native_wheel(wheels),
            overlay=[helper_wheel(wheels, helper)],
            name="demo",
            env={"KVENV_DEMO": "1"},
            target=target,
        )
        make_bundle(project.loaded(), work / f"bundle-{name}", cache=work / "make-cache")


def main() -> int:
    if sys.argv[1] == "--prepare":
        prepare(Path(sys.argv[2]))
        return 0
    work = Path(sys.argv[1])
    try:
        results = run(work)
    except BaseException as exc:  # record, so the test shows what went wrong
        import traceback

        results = {"crashed": "".join(traceback.format_exception(exc))}
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
