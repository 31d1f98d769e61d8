"""The fetch phase of a cold apply alone: every wheel of a portable lock located on the default
index and downloaded into an empty cache (hashed on the way, verified, committed), nothing
unpacked, for several kvenv installs and download worker counts side by side (issue 25).

    python benchmarks/fetch_index.py LOCK --kvenv LABEL=PATH [--kvenv ...] [--jobs 8[,16]]
        [--rounds 5] [--out PATH.json]

LOCK is a portable lock (e.g. the one ``benchmarks/apply_index.py`` makes for the jupyterlab
closure; its native wheel is left out). Each run is a child of that kvenv's interpreter calling
``kvenv.fetch.fetch_all`` with ``jobs`` workers and an empty cache; the index environment
variables are cleared (the default index). Rounds alternate the order of the runs; medians of
wall and CPU (user + sys of the child) are reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _common import medians, python_of, run_child, run_facts, write_results

REPO = Path(__file__).resolve().parent.parent

FETCH = r"""
import sys, tomllib
from pathlib import Path
from kvenv.fetch import fetch_all
from kvenv.plan.artifacts import Artifact
lock, cache, jobs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
doc = tomllib.loads(lock.read_text())
wanted = [
    Artifact(p["name"], p["version"], w["name"], w["hashes"]["sha256"], w.get("size"),
             "overlay", lock.parent / "absent" / w["name"], index_fallback=True)
    for p in doc["packages"] if not p.get("tool", {}).get("kvenv", {}).get("native")
    for w in p["wheels"][:1]
]
got = fetch_all(wanted, cache=cache, jobs=jobs)
assert len(got) == len(wanted)
print(len(got))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--jobs", default="8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tmp", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/fetch-index.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kvenv-fetch-index-", dir=args.tmp))
    script = work / "fetch.py"  # a file, not -c: the child must not import kvenv from the cwd
    script.write_text(FETCH)
    strip = ("PIP_", "UV_", "KVENV_", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(strip)}
    runs = []
    for item in args.kvenv:
        label, _, path = item.partition("=")
        for jobs in args.jobs.split(","):
            runs.append((f"kvenv[{label}] jobs={jobs}", python_of(Path(path).resolve()), jobs))
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in runs}
    for number in range(args.rounds):
        for name, python, jobs in runs if number % 2 == 0 else runs[::-1]:
            cache = work / f"cache-{number}-{len(samples[name])}-{jobs}"
            done = run_child([python, str(script), str(args.lock.resolve()), str(cache), jobs], env)
            shutil.rmtree(cache, ignore_errors=True)
            if done.returncode != 0:
                raise SystemExit(f"{name} exited {done.returncode}: {done.stderr}")
            samples[name].append((done.wall, done.cpu))
        print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    results = medians(samples)
    data = {
        "benchmark": "fetch-index",
        "what": "the fetch phase of a cold apply alone: a portable lock's wheels located on the "
        "default index and downloaded into an empty cache, nothing unpacked",
        "lock": str(args.lock),
        "kvenv": dict(item.partition("=")[::2] for item in args.kvenv),
        **run_facts(),
        "samples": results,
    }
    write_results(args.out, data)
    for name, row in results.items():
        print(f"{name:<28} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:6.2f} s  {row['walls']}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
