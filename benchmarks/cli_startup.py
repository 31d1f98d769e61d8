"""CLI startup time: ``kvenv --version`` and ``kvenv validate kaggle-t4x2-cu128`` against a bare
``python -c pass`` on the same interpreter, interleaved round by round, medians reported.

    python benchmarks/cli_startup.py [--rounds N] [--output PATH]

Writes JSON (default ``benchmarks/results/cli_startup.json``) and prints a short table. The aim
is under 60 ms above bare Python for both commands. The commands run in an empty temporary
directory, so ``validate`` finds the built-in profile as an installed kvenv would.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AIM_MS = 60.0


def _kvenv_command() -> list[str]:
    """The console script next to this interpreter (what users run), else ``python -m kvenv``."""
    script = Path(sys.executable).with_name("kvenv")
    if script.is_file():
        return [str(script)]
    found = shutil.which("kvenv")
    return [found] if found else [sys.executable, "-m", "kvenv"]


def _time_once(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(rounds: int) -> dict[str, object]:
    kvenv = _kvenv_command()
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kvenv --version": [*kvenv, "--version"],
        "kvenv validate kaggle-t4x2-cu128": [*kvenv, "validate", "kaggle-t4x2-cu128"],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVENV_")}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as cwd:
        for argv in cases.values():  # warm the OS caches and bytecode once
            _time_once(argv, cwd, env)
        for _ in range(rounds):
            for name, argv in cases.items():
                samples[name].append(_time_once(argv, cwd, env))
    bare = statistics.median(samples["python -c pass"]) * 1000
    results = {}
    for name, values in samples.items():
        median = statistics.median(values) * 1000
        results[name] = {
            "median_ms": round(median, 2),
            "min_ms": round(min(values) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2),
            "above_bare_ms": round(median - bare, 2),
        }
    return {
        "benchmark": "cli_startup",
        "rounds": rounds,
        "aim_above_bare_ms": AIM_MS,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "kvenv_command": " ".join(
            Path(kvenv[0]).name if i == 0 else a for i, a in enumerate(kvenv)
        ),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "cli_startup.json")
    args = parser.parse_args()
    report = measure(args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    results = report["results"]
    assert isinstance(results, dict)
    for name, row in results.items():
        median, above = row["median_ms"], row["above_bare_ms"]
        print(f"{name:<36} median {median:7.1f} ms   above bare {above:6.1f} ms")
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
