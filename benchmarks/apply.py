"""Install the same wheel set from local files with kvenv, ``uv pip install --target --no-deps``
and ``pip install --target --no-deps``, cold and warm, in one run.

- cold: the wheels were downloaded but never unpacked (kvenv: empty store; uv: empty cache;
  pip has no unpack cache, so it is always cold).
- warm: the wheels were unpacked before (kvenv: store filled by the cold run; uv: cache filled
  by its cold run); a fresh, empty target.

Like with like: all three run as a child process from the same wheel files (the page cache is
warmed once by reading every wheel before the first round), with no dependency resolution
(``--no-deps``), no bytecode compilation (uv's default; ``--no-compile`` for pip) and no
network (``--offline`` / ``--no-index``); uv hard-links from its cache (``--link-mode
hardlink``) as kvenv does from its store. kvenv runs the functions ``kvenv apply`` uses to build
a generation's layer (:func:`kvenv.env.store.unpack_all` then
:func:`kvenv.env.store.link_layer`), with
every safety check on (entries validated before writing, contents checked against RECORD,
protected names refused); fetching, sha256 verification of the wheel files and the manifest
are left out, as the other two do none of them either. Wall seconds and CPU seconds (user +
sys of the child) are recorded for each run; the medians are compared.

Every round writes into fresh directories and nothing is deleted until the end: on ext4 an
inode freed in the last minute is skipped, slowly, when new files are created
(``recently_deleted``), so deleting the previous round's trees just before one tool's run
would charge that tool for it. The tools' order alternates between rounds for the same reason.

Usage::

    python benchmarks/apply.py --wheels DIR [--exclude torch --exclude nvidia] [--rounds 3]
        [--pip-rounds N] [--jobs N] [--out benchmarks/results/apply.json]

``DIR`` holds the wheels, e.g. from ``pip download --no-deps --only-binary=:all: -d DIR
<requirements>`` or the cache of a Kaggle overlay apply. ``--exclude PREFIX`` leaves out wheels
whose file name starts with ``PREFIX`` (e.g. the host's torch and the CUDA wheels, to measure
an overlay only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = """
import json, sys
from pathlib import Path
from kvenv.env.store import GenerationLayout, link_layer, unpack_all
spec = json.loads(Path(sys.argv[1]).read_text())
wheels = {sha: Path(path) for sha, path in spec["wheels"].items()}
target = Path(spec["target"])
entries = unpack_all(Path(spec["store"]), wheels, jobs=spec["jobs"])
site = target / "overlay"
site.mkdir(parents=True)
(target / "bin").mkdir()
layout = GenerationLayout.beside(site)
link_layer([entries[sha] for sha in wheels], layout, python=sys.executable, jobs=spec["jobs"])
"""

RUNS = ("kvenv_cold", "kvenv_warm", "uv_cold", "uv_warm", "pip")


def _timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def kvenv_command(wheels: dict[str, Path], store: Path, target: Path, jobs: int) -> list[str]:
    spec = target.with_suffix(".json")
    data = {"wheels": {k: str(v) for k, v in wheels.items()}, "store": str(store),
            "target": str(target), "jobs": jobs}  # fmt: skip
    spec.write_text(json.dumps(data))
    return [sys.executable, "-c", _CHILD, str(spec)]


def uv_command(files: list[Path], cache: Path, target: Path) -> list[str]:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    return [uv, "pip", "install", "--no-deps", "--target", str(target), "--cache-dir", str(cache),
            "--python", sys.executable, "--offline", "--link-mode", "hardlink", "--quiet",
            *map(str, files)]  # fmt: skip


def pip_command(files: list[Path], target: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir",
            "--disable-pip-version-check", "--quiet", "--no-compile", "--target", str(target),
            *map(str, files)]  # fmt: skip


def _warm_page_cache(files: list[Path]) -> None:
    for path in files:
        with path.open("rb") as stream:
            while stream.read(1 << 24):
                pass


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _tree_size(root: Path) -> tuple[int, int]:
    count = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            count += 1
            size += os.lstat(os.path.join(directory, name)).st_size
    return count, size


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, help="same as --wheels")
    parser.add_argument("--wheels", type=Path, help="directory of the wheels to install")
    parser.add_argument("--exclude", action="append", default=[], metavar="PREFIX")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pip-rounds", type=int, help="run pip in the first N rounds only (slow)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tmp", type=Path, help="where stores, caches and targets go")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/apply.json"))
    args = parser.parse_args()
    wheel_dir = args.wheels or args.dir
    if wheel_dir is None:
        parser.error("name the wheel directory with --wheels DIR")
    files = [
        f for f in sorted(wheel_dir.glob("*.whl")) if not f.name.startswith(tuple(args.exclude))
    ]
    if not files:
        parser.error(f"no wheels in {wheel_dir}")
    wheels = {_sha256(f): f for f in files}
    _warm_page_cache(files)
    pip_rounds = args.rounds if args.pip_rounds is None else args.pip_rounds
    runs = [r for r in RUNS if pip_rounds or r != "pip"]
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    with tempfile.TemporaryDirectory(prefix="kvenv-bench-", dir=args.tmp) as tmp:
        base = Path(tmp)
        for index in range(args.rounds):
            here = base / f"round{index}"  # fresh dirs; nothing is deleted until the end
            store, cache = here / "store", here / "uvcache"
            k1, k2, u1, u2, p1 = (here / n for n in ("k1", "k2", "u1", "u2", "p1"))
            here.mkdir()
            commands = {
                "kvenv_cold": kvenv_command(wheels, store, k1, args.jobs),
                "kvenv_warm": kvenv_command(wheels, store, k2, args.jobs),
                "uv_cold": uv_command(files, cache, u1),
                "uv_warm": uv_command(files, cache, u2),
                "pip": pip_command(files, p1),
            }
            pairs = [["kvenv_cold", "kvenv_warm"], ["uv_cold", "uv_warm"]]
            order = pairs[index % 2] + pairs[1 - index % 2] + ["pip"]  # alternate who goes first
            for name in (n for n in order if n in runs and (n != "pip" or index < pip_rounds)):
                seconds, cpu_seconds = _timed(commands[name])
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
                print(f"{name:11} {seconds:7.2f} s wall {cpu_seconds:7.2f} s cpu", flush=True)
        count, installed = _tree_size(base / "round0" / "k2")
        uv_count, _ = _tree_size(base / "round0" / "u2")
    medians = {k: statistics.median(v) for k, v in wall.items()}
    cpu_medians = {k: statistics.median(v) for k, v in cpu.items()}
    ratios = {
        "uv_cold_over_kvenv_cold": medians["uv_cold"] / medians["kvenv_cold"],
        "uv_warm_over_kvenv_warm": medians["uv_warm"] / medians["kvenv_warm"],
    }
    if "pip" in medians:
        ratios["pip_over_kvenv_cold"] = medians["pip"] / medians["kvenv_cold"]
        ratios["pip_over_kvenv_warm"] = medians["pip"] / medians["kvenv_warm"]
    result = {
        "wheels": len(files),
        "excluded_prefixes": args.exclude,
        "wheel_bytes": sum(f.stat().st_size for f in files),
        "installed_files": count,
        "installed_bytes": installed,
        "uv_installed_files": uv_count,
        "wheel_set_digest": hashlib.sha256("".join(sorted(wheels)).encode()).hexdigest(),
        "rounds": args.rounds,
        "pip_rounds": min(pip_rounds, args.rounds),
        "jobs": args.jobs,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_at_end": os.getloadavg(),
        "seconds": wall,
        "cpu_seconds": cpu,
        "median_seconds": medians,
        "median_cpu_seconds": cpu_medians,
        "ratios": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"median_seconds": medians, "median_cpu_seconds": cpu_medians,
                      "ratios": ratios}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
