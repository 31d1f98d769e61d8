"""The checks a warm ``kvenv apply --from BUNDLE`` repeats, in process, for one kvenv source tree
(issue 13): opening the bundle (every file hashed against ``SHA256SUMS``, or, with identity
seals, only the files changed since an earlier run) and reusing the store (one seal check per
entry: a ``stat`` per file), with wall and CPU medians.

    python benchmarks/warm_checks.py --tree SRC --wheels DIR [--rounds 7] [--label NAME]
        [--out benchmarks/results/warm-checks.json]

``--tree`` is a kvenv source tree (the repository root, or a ``git worktree`` of an older
commit) put first on ``sys.path``; ``--wheels DIR`` the wheels to unpack into a fresh store
and bundle (made here with ``make_bundle``-like layout: the wheels and a ``SHA256SUMS``).
Results of several trees go into one file, one key per ``--label``.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _timed(action: Any, rounds: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "median_ms": round(statistics.median(walls) * 1000, 1),
        "cpu_median_ms": round(statistics.median(cpus) * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--label", default="tree")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "warm-checks.json"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from kvenv.env.seal import seal_problem
    from kvenv.env.store import lookup, unpack_all
    from kvenv.fetch import bundle as bundle_module

    work = Path(tempfile.mkdtemp(prefix="kvenv-warm-checks-"))
    wheels = {}
    directory = work / "bundle" / "wheels"
    directory.mkdir(parents=True)
    lines = []
    for wheel in sorted(args.wheels.glob("*.whl")):
        copy = directory / wheel.name
        shutil.copy2(wheel, copy)
        digest = hashlib.sha256(copy.read_bytes()).hexdigest()
        wheels[digest] = copy
        lines.append(f"{digest}  wheels/{wheel.name}\n")
    sums = work / "bundle" / "SHA256SUMS"
    sums.write_text("".join(lines), encoding="utf-8")
    store = work / "store"
    unpack_all(store, wheels, jobs=os.cpu_count() or 2)
    entries = [e for sha in wheels if (e := lookup(store, sha)) is not None]
    files = sum(len(e.dist.files) for e in entries)

    def seal_checks() -> None:
        assert not any(seal_problem(e.path) for e in entries)

    def reuse_all() -> None:
        unpack_all(store, wheels, jobs=os.cpu_count() or 2)

    parsed = bundle_module._read_sums(work / "bundle")
    verify = bundle_module._verify_files
    has_seals = "seals" in inspect.signature(verify).parameters
    results: dict[str, Any] = {
        "seal check of every store entry, one thread": _timed(seal_checks, args.rounds),
        "store reuse (unpack_all, every entry warm)": _timed(reuse_all, args.rounds),
        "bundle files hashed (no seals)": _timed(
            lambda: verify(work / "bundle", parsed, jobs=4), args.rounds
        ),
    }
    if has_seals:
        cache = work / "cache"
        verify(work / "bundle", parsed, jobs=4, seals=cache)  # the first, full check
        results["bundle files, sealed by an earlier run"] = _timed(
            lambda: verify(work / "bundle", parsed, jobs=4, seals=cache), args.rounds
        )
    size = sum(p.stat().st_size for p in wheels.values())
    shutil.rmtree(work, ignore_errors=True)
    data: dict[str, Any] = {}
    if args.out.exists():
        data = json.loads(args.out.read_text(encoding="utf-8"))
    data.update(
        {
            "benchmark": "warm-checks",
            "what": "in process: the checks a warm apply --from repeats",
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "rounds": args.rounds,
        }
    )
    data.setdefault("results", {})[args.label] = {
        "wheels": len(wheels),
        "files": files,
        "bundle_bytes": size,
        "load_average": os.getloadavg(),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for name, row in results.items():
        print(
            f"{args.label:<8} {name:<46} {row['median_ms']:8.1f} ms",
            f"cpu {row['cpu_median_ms']:8.1f}",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
