"""A cold apply over a network, the phases overlapped or not (issue 25): every wheel of
``--wheels DIR`` downloaded from a local HTTP server that sends each connection at most
``--rate`` MB/s (a network, not a disk), then unpacked and linked.

kvenv runs in process through its API (plain ``http://127.0.0.1`` needs the tests' loopback
seam, :func:`kvenv._util.urls.allow_loopback_http`), once per source tree given with
``--tree LABEL=DIR`` (e.g. the commit before the pipeline, exported with ``git archive``, and
this working tree), each in a child process of its own with an empty cache and a fresh root,
``jobs=8``; a tree that has the ``compile`` option runs without bytecode, so both do the same
work. ``uv pip install --target --no-deps`` of the same URLs into an empty cache runs for
reference. Rounds alternate the order; wall and CPU medians.

    python benchmarks/pipeline.py --wheels DIR --tree before=/tmp/base --tree after=.
        [--rate 8] [--rounds 3] [--uv UV] [--out benchmarks/results/pipeline.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _common import medians, run_child, run_facts, tool_version, write_results
from apply_cli import _project

REPO = Path(__file__).resolve().parent.parent

_APPLY = """
import inspect, sys
from kvenv._util.urls import allow_loopback_http
from kvenv.env.apply import ApplyOptions, apply, plan_apply
from kvenv.lock.input import profile_lock
from kvenv.model.loading import load_profile
from kvenv.model.locations import Locations
from kvenv.probe.host import take_snapshot
from pathlib import Path
profile, root, cache = sys.argv[1:4]
with allow_loopback_http():
    loaded = load_profile(profile)
    where = Locations(root=Path(root), cache=Path(cache))
    plan = plan_apply(loaded, profile_lock(loaded), take_snapshot(), where)
    extra = {"compile": False} if "compile" in inspect.signature(ApplyOptions).parameters else {}
    result = apply(plan, ApplyOptions(jobs=8, **extra))
    assert result.status == "applied", result.status
"""


def _server(directory: Path, rate: float) -> ThreadingHTTPServer:
    chunk = 64 * 1024

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            path = directory / self.path.rsplit("/", 1)[-1]
            if not path.is_file():
                self.send_response(404)
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if head:
                return
            start = time.perf_counter()
            for offset in range(0, len(data), chunk):
                try:
                    self.wfile.write(data[offset : offset + chunk])
                except (BrokenPipeError, ConnectionResetError):
                    return  # a client that read what it wanted (uv probes with ranges)
                ahead = (offset + chunk) / rate - (time.perf_counter() - start)
                if ahead > 0:
                    time.sleep(ahead)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=DIR")
    parser.add_argument("--rate", type=float, default=8.0, help="MB/s per connection")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/pipeline.json")
    args = parser.parse_args()
    trees = {}
    for item in args.tree:
        label, _, path = item.partition("=")
        trees[label] = Path(path).resolve()
    wheels = sorted(args.wheels.glob("*.whl"))
    work = Path(tempfile.mkdtemp(prefix="kvenv-pipeline-"))
    profile = _project(work, wheels)
    httpd = _server(work / "proj" / "wheels", args.rate * 1e6)
    host, port = httpd.server_address[:2]
    base_url = f"http://{host!s}:{port}/"
    lock = profile.parent.parent / "locks" / "pylock.t.toml"
    text = lock.read_text(encoding="utf-8")
    urls = []
    for wheel in wheels:
        text = text.replace(f'path = "../wheels/{wheel.name}"', f'url = "{base_url}{wheel.name}"')
        urls.append(base_url + wheel.name)
    lock.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> Path:
        return work / f"{kind}-{next(counter)}"

    samples: dict[str, list[tuple[float, float]]] = {}
    for number in range(args.rounds):
        jobs: list[tuple[str, list[str], dict[str, str]]] = []
        for label, tree in trees.items():
            command = [sys.executable, "-c", _APPLY, str(profile), str(fresh("root")),
                       str(fresh("cache"))]  # fmt: skip
            jobs.append((f"kvenv[{label}]", command, dict(env, PYTHONPATH=str(tree))))
        if args.uv:
            command = [args.uv, "pip", "install", "--no-deps", "--target", str(fresh("uvt")),
                       "--cache-dir", str(fresh("uvcache")), "--python", sys.executable,
                       "--link-mode", "hardlink", "--quiet", *urls]  # fmt: skip
            jobs.append(("uv", command, env))
        if number % 2:
            jobs.reverse()
        for name, command, child_env in jobs:
            done = run_child(command, child_env)
            if done.returncode != 0:
                raise SystemExit(f"{name} exited {done.returncode}: {done.stderr[-2000:]}")
            samples.setdefault(name, []).append((done.wall, done.cpu))
        print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    httpd.shutdown()
    rows = medians(samples, 4)
    data = {
        "benchmark": "pipeline",
        "what": "cold apply from a rate-limited local HTTP server, jobs=8, no bytecode",
        "wheels": len(wheels),
        "wheel_bytes": sum(p.stat().st_size for p in wheels),
        "rate_mb_s_per_connection": args.rate,
        "trees": {label: str(tree) for label, tree in trees.items()},
        "uv": tool_version(args.uv),
        **run_facts(),
        "samples": rows,
    }
    write_results(args.out, data)
    for name, row in rows.items():
        print(f"{name:<16} wall {row['wall_s']:8.3f} s  cpu {row['cpu_s']:8.3f} s")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
