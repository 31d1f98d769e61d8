"""``kvenv lock --offline`` with a warm cache against ``uv pip compile --offline`` with a warm
cache, on the same closure served by a loopback simple index (PEP 691 JSON pages, PEP 658
metadata), in one run, alternating rounds (issue 13). Several kvenv installs can be timed in
the same run: ``--kvenv LABEL=PATH`` once per install.

The closure is every wheel of ``--wheels DIR`` (e.g. the jupyterlab closure), served from
``tests.support.lockenv.serve_index``; the requirement is ``--require`` (default
``jupyterlab``). kvenv locks a profile whose native wheel (built here) requires it, for a
target that is this interpreter (CPython, its ABI, x86_64 manylinux of this glibc) with an
empty host; uv compiles the same requirement for the same Python version and platform with
``--generate-hashes``. Each tool's cache is filled once online (not timed); then every round
is offline.

    python benchmarks/lock_offline.py --wheels DIR --kvenv after=/venv/bin/kvenv
        [--kvenv before=...] [--uv UV] [--rounds 7] [--out benchmarks/results/lock-offline.json]

Run from the repository root (the index server and wheels come from ``tests.support``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _common import bench_project, run_facts, tool_version, write_results  # noqa: E402

from tests.support.lockenv import INDEX_ENV, serve_index  # noqa: E402


def _timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])}... exited {done.returncode}: {done.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--require", default="jupyterlab")
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/lock-offline.json")
    args = parser.parse_args()
    kvenvs = {}
    for item in args.kvenv:
        label, _, path = item.partition("=")
        kvenvs[label] = str(Path(path).absolute())
    work = Path(tempfile.mkdtemp(prefix="kvenv-lock-offline-"))
    env = {k: v for k, v in os.environ.items() if k not in INDEX_ENV and not k.startswith("KVENV")}
    profile = bench_project(
        work / "proj",
        [args.require],
        python=platform.python_version(),
        machine=platform.machine(),
        glibc=platform.libc_ver()[1],
        source="recorded",
    )
    (work / "reqs.in").write_text(args.require + "\n")
    samples: dict[str, list[float]] = {}
    with serve_index(args.wheels) as index:

        def kvenv_cmd(label: str, offline: bool) -> list[str]:
            return [kvenvs[label], "lock", str(profile), "--index-url", index, "--cache-dir",
                    str(work / f"cache-{label}"), "-o", str(work / f"pylock-{label}.toml"),
                    *(["--offline"] if offline else [])]  # fmt: skip

        def uv_cmd(offline: bool) -> list[str]:
            version = platform.python_version()
            plat = f"{platform.machine()}-manylinux_{platform.libc_ver()[1].replace('.', '_')}"
            return [args.uv, "pip", "compile", str(work / "reqs.in"), "--index-url", index,
                    "--python-version", version, "--python-platform", plat,
                    "--generate-hashes", "--cache-dir", str(work / "uv-cache"), "--quiet",
                    "-o", str(work / "uv-reqs.txt"),
                    *(["--offline"] if offline else [])]  # fmt: skip

        for label in kvenvs:  # fill the caches (not timed)
            _timed(kvenv_cmd(label, offline=False), env)
        if args.uv:
            _timed(uv_cmd(offline=False), env)
        for number in range(args.rounds):
            jobs = [(f"kvenv[{label}] warm offline", kvenv_cmd(label, True)) for label in kvenvs]
            if args.uv:
                jobs.append(("uv warm offline", uv_cmd(True)))
            if number % 2:
                jobs.reverse()
            for name, command in jobs:
                samples.setdefault(name, []).append(_timed(command, env))
    locked = {}
    for label in kvenvs:
        text = (work / f"pylock-{label}.toml").read_text(encoding="utf-8")
        locked[label] = text.count("[[packages]]")
    results = {
        name: {"median_s": round(statistics.median(v), 4), "walls": [round(x, 4) for x in v]}
        for name, v in samples.items()
    }
    ratios = {}
    if args.uv:
        uv = results["uv warm offline"]["median_s"]
        for label in kvenvs:
            ratios[f"kvenv[{label}]/uv"] = round(
                results[f"kvenv[{label}] warm offline"]["median_s"] / uv, 2
            )
    data = {
        "benchmark": "lock-offline",
        "what": "lock with a warm cache, offline, loopback index; kvenv vs uv pip compile",
        "requirement": args.require,
        "wheels_served": len(list(args.wheels.glob("*.whl"))),
        "packages_locked": locked,
        "uv": tool_version(args.uv),
        "rounds": args.rounds,
        **run_facts(),
        "results": results,
        "ratios": ratios,
    }
    write_results(args.out, data)
    for name, row in results.items():
        print(f"{name:<34} {row['median_s'] * 1000:8.1f} ms")
    for name, value in ratios.items():
        print(f"{name:<34} {value}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
