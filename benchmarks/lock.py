"""Time ``kvenv lock`` against ``uv pip compile`` on the same requirements and the same target
(CPython 3.12, manylinux_2_35 x86_64, hashes), cold (empty caches) and warm, in one run.

    .venv/bin/python benchmarks/lock.py [--rounds 3] [--requirements FILE]

kvenv locks a throwaway profile whose host snapshot is empty (so both tools resolve the whole
closure) and whose native wheel is a tiny local wheel requiring the requirement set. uv runs
``uv pip compile REQS --python-version 3.12 --python-platform x86_64-manylinux_2_35
--generate-hashes``. Index environment variables are cleared for both. "warm-refresh" is kvenv
with ``--refresh`` (index pages revalidated, as uv does when the index sends no cache headers).
Results: ``benchmarks/results/lock.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import bench_project  # noqa: E402

from tests.support.lockenv import INDEX_ENV  # noqa: E402

# The reference system's pins, in the shared folder beside the checkout (../shared).
REFERENCE = ROOT.parent / "shared" / "reference" / "kaggle-t4x2-cu128" / "overlay-requirements.txt"
FALLBACK = ["requests>=2.31", "pyyaml", "numpy>=1.26", "pydantic>=2", "rich", "six"]
BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in INDEX_ENV}
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def _kvenv_pins(path: Path) -> dict[str, str]:
    import tomllib

    doc = tomllib.loads(path.read_text())
    return {p["name"]: p["version"] for p in doc["packages"]}


def _uv_pins(path: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    out = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, _, rest = line.partition("==")
            out[canonicalize_name(name.split("[")[0])] = rest.split()[0].rstrip("\\").strip()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requirements", type=Path)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/lock.json")
    args = parser.parse_args()
    source = args.requirements or (REFERENCE if REFERENCE.is_file() else None)
    if source is not None:
        lines = [
            line.split("#", 1)[0].strip()
            for line in source.read_text().splitlines()
            if line.split("#", 1)[0].strip()
        ]
    else:
        lines = FALLBACK
    work = Path(tempfile.mkdtemp(prefix="kvenv-bench-"))
    try:
        project = work / "project"
        bench_project(
            project, lines, python="3.12.13", machine="x86_64", glibc="2.35", protected=[]
        )
        reqs = work / "requirements.txt"
        reqs.write_text("\n".join(lines) + "\n")
        uv = str(BIN / "uv")
        kvenv = str(BIN / "kvenv")
        times: dict[str, dict[str, list[float]]] = {
            "cold": {"kvenv": [], "uv": []},
            "warm": {"kvenv": [], "uv": []},
            "warm-refresh": {"kvenv": []},
        }
        packages: dict[str, int] = {}
        agreement: dict[str, object] = {}
        for round_ in range(args.rounds):
            kcache, ucache = work / f"kc{round_}", work / f"uc{round_}"
            kv = [kvenv, "lock", "bench", "--output", str(work / "pylock.bench.toml")]
            kenv = _env(KVENV_CACHE_DIR=str(kcache))
            uv_argv = [
                uv, "pip", "compile", str(reqs), "--python-version", "3.12",
                "--python-platform", "x86_64-manylinux_2_35", "--generate-hashes",
                "--cache-dir", str(ucache), "-q", "-o", str(work / "uv.txt"),
            ]  # fmt: skip
            order = [("kvenv", kv, kenv), ("uv", uv_argv, _env())]
            if round_ % 2:
                order.reverse()
            for phase in ("cold", "warm"):
                for tool, argv, env in order:
                    if phase == "cold" and tool == "kvenv":
                        (work / "pylock.bench.toml").unlink(missing_ok=True)
                    times[phase][tool].append(_run(argv, env, project))
            times["warm-refresh"]["kvenv"].append(_run([*kv, "--refresh"], kenv, project))
            ours = _kvenv_pins(work / "pylock.bench.toml")
            theirs = _uv_pins(work / "uv.txt")
            packages = {"kvenv": len(ours), "uv": len(theirs)}
            agreement = {
                "same_versions": ours == theirs,
                "only_kvenv": sorted(f"{n}=={v}" for n, v in ours.items() if theirs.get(n) != v),
                "only_uv": sorted(f"{n}=={v}" for n, v in theirs.items() if ours.get(n) != v),
            }
            shutil.rmtree(kcache, ignore_errors=True)
            shutil.rmtree(ucache, ignore_errors=True)
        medians = {
            phase: {tool: statistics.median(v) for tool, v in tools.items()}
            for phase, tools in times.items()
        }
        ratios = {
            "cold": medians["cold"]["kvenv"] / medians["cold"]["uv"],
            "warm": medians["warm"]["kvenv"] / medians["warm"]["uv"],
            "warm-refresh": medians["warm-refresh"]["kvenv"] / medians["warm"]["uv"],
        }
        uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout
        result = {
            "benchmark": "lock",
            "target": "cp312 manylinux_2_35_x86_64",
            "requirements": str(source) if source else "built-in fallback list",
            "requirement_count": len(lines),
            "rounds": args.rounds,
            "uv": uv_version.strip(),
            "packages": packages,
            "agreement": agreement,
            "seconds": times,
            "median_seconds": medians,
            "ratio_kvenv_to_uv": ratios,
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        summary = {"median_seconds": medians, "ratio_kvenv_to_uv": ratios, "packages": packages}
        print(json.dumps({**summary, "same_versions": agreement.get("same_versions")}, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
