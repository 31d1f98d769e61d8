"""Install the same wheel set from local files with kvenv, ``uv pip install --target --no-deps``
and ``pip install --target --no-deps``, cold and warm, in one run.

- cold: the wheels were downloaded but never unpacked (kvenv: empty store; uv: empty cache;
  pip has no unpack cache, so it is always cold).
- warm: the wheels were unpacked before (kvenv: store filled; uv: cache filled); a fresh target.

kvenv is measured through the same functions ``kvenv apply`` uses to build a generation's layer
(:func:`kvenv.store.unpack_all` then :func:`kvenv.store.link_layer`), so fetching and the
manifest are left out for all three alike.

Usage::

    python benchmarks/apply.py WHEEL_DIR [--rounds 3] [--out benchmarks/results/apply.json]

``WHEEL_DIR`` holds the wheels, e.g. from ``pip download --no-deps --only-binary=:all: -d DIR
<requirements>`` or the cache of a Kaggle overlay apply.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kvenv.hashing import sha256_file
from kvenv.store import GenerationLayout, link_layer, unpack_all


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _fresh(base: Path, name: str) -> Path:
    path = base / name
    if path.exists():
        shutil.rmtree(path)
    return path


def kvenv_install(wheels: dict[str, Path], store: Path, target: Path, jobs: int) -> None:
    entries = unpack_all(store, wheels, jobs=jobs)
    site = target / "overlay"
    site.mkdir(parents=True)
    (target / "bin").mkdir()
    link_layer(
        [entries[sha] for sha in wheels],
        GenerationLayout.beside(site),
        python=sys.executable,
        jobs=jobs,
    )


def uv_install(files: list[Path], cache: Path, target: Path) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    subprocess.run(
        [uv, "pip", "install", "--no-deps", "--target", str(target), "--cache-dir", str(cache),
         "--python", sys.executable, "--offline", "--quiet", *map(str, files)],
        check=True,
    )  # fmt: skip


def pip_install(files: list[Path], target: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir",
         "--disable-pip-version-check", "--quiet", "--no-compile", "--target", str(target),
         *map(str, files)],
        check=True,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/apply.json"))
    args = parser.parse_args()
    files = sorted(args.wheels.glob("*.whl"))
    if not files:
        parser.error(f"no wheels in {args.wheels}")
    wheels = {sha256_file(f)[0]: f for f in files}
    size = sum(f.stat().st_size for f in files)
    times: dict[str, list[float]] = {k: [] for k in ("kvenv_cold", "kvenv_warm", "uv_cold",
                                                     "uv_warm", "pip")}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kvenv-bench-") as tmp:
        base = Path(tmp)
        for _ in range(args.rounds):
            store, cache = _fresh(base, "store"), _fresh(base, "uvcache")
            k1, k2, u1, u2, p1 = (_fresh(base, n) for n in ("k1", "k2", "u1", "u2", "p1"))
            runs: dict[str, Callable[[], object]] = {
                "kvenv_cold": partial(kvenv_install, wheels, store, k1, args.jobs),
                "kvenv_warm": partial(kvenv_install, wheels, store, k2, args.jobs),
                "uv_cold": partial(uv_install, files, cache, u1),
                "uv_warm": partial(uv_install, files, cache, u2),
                "pip": partial(pip_install, files, p1),
            }
            for name, run in runs.items():
                times[name].append(_timed(run))
        installed = sum(p.stat().st_size for p in (base / "k2").rglob("*") if p.is_file())
        count = sum(1 for p in (base / "k2").rglob("*") if p.is_file())
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "wheels": len(files),
        "wheel_bytes": size,
        "installed_files": count,
        "installed_bytes": installed,
        "wheel_set_digest": hashlib.sha256("".join(sorted(wheels)).encode()).hexdigest(),
        "rounds": args.rounds,
        "jobs": args.jobs,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "seconds": times,
        "median_seconds": medians,
        "ratios": {
            "uv_cold_over_kvenv_cold": medians["uv_cold"] / medians["kvenv_cold"],
            "uv_warm_over_kvenv_warm": medians["uv_warm"] / medians["kvenv_warm"],
            "pip_over_kvenv_cold": medians["pip"] / medians["kvenv_cold"],
            "pip_over_kvenv_warm": medians["pip"] / medians["kvenv_warm"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"median_seconds": medians, "ratios": result["ratios"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
