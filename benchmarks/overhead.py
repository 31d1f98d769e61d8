"""kvenv's fixed costs against bare Python startup: ``python -c pass``, ``python -c "import
kvenv"``, ``kvenv --version``, ``kvenv plan``, ``kvenv activate`` and a no-op ``kvenv apply``
of an applied profile, each as a fresh process, interleaved round by round, medians reported.

    python benchmarks/overhead.py --profile PATH [--kvenv EXE] [--rounds N] [--output PATH]

``--profile`` must already be applied (``kvenv apply PATH``) in the root that ``$KVENV_ROOT`` /
``$KVENV_CACHE_DIR`` (or the profile's ``[paths]``) name, so ``apply`` is the no-op it measures;
``--kvenv`` is the console script to time (default: the one beside this interpreter), and its
own interpreter is the "bare Python" of the comparison. Aims (issue 7): no-op apply under
300 ms, plan and activate under 100 ms. Writes JSON (default
``benchmarks/results/overhead.json``) and prints a table.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
AIMS_MS = {"kvenv apply (no-op)": 300.0, "kvenv plan": 100.0, "kvenv activate": 100.0}


def _kvenv(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    beside = Path(sys.executable).with_name("kvenv")
    found = beside if beside.is_file() else Path(shutil.which("kvenv") or "")
    if not found.is_file():
        raise SystemExit("no kvenv console script found; pass --kvenv")
    return found


def _interpreter_of(script: Path) -> str:
    """The interpreter in a console script's shebang (the bare Python it is compared with)."""
    first = script.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    return first.removeprefix("#!").strip().split()[0] if first.startswith("#!") else sys.executable


def _time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]!r}")
    return elapsed


def measure(kvenv: Path, profile: str, rounds: int) -> dict[str, object]:
    python = _interpreter_of(kvenv)
    k = str(kvenv)
    cases = {
        "python -c pass": [python, "-c", "pass"],
        'python -c "import kvenv"': [python, "-c", "import kvenv"],
        "kvenv --version": [k, "--version"],
        "kvenv plan": [k, "plan", profile],
        "kvenv activate": [k, "activate", profile],
        "kvenv apply (no-op)": [k, "apply", profile],
        "kvenv status": [k, "status", profile],
    }
    env = dict(os.environ)
    state = subprocess.run([k, "apply", "--json", profile], env=env, capture_output=True, text=True)
    if state.returncode != 0 or json.loads(state.stdout).get("status") != "up-to-date":
        raise SystemExit(f"{profile} is not applied and current; run `kvenv apply {profile}` first")
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for argv in cases.values():  # warm the page cache and bytecode once
        _time_once(argv, env)
    for _ in range(rounds):
        for name, argv in cases.items():
            samples[name].append(_time_once(argv, env))
    bare = statistics.median(samples["python -c pass"]) * 1000
    results: dict[str, dict[str, float | bool]] = {}
    for name, values in samples.items():
        median = statistics.median(values) * 1000
        row: dict[str, float | bool] = {
            "median_ms": round(median, 2),
            "min_ms": round(min(values) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2),
            "above_bare_ms": round(median - bare, 2),
            "ratio_to_bare": round(median / bare, 2),
        }
        if name in AIMS_MS:
            row["aim_ms"] = AIMS_MS[name]
            row["aim_met"] = median <= AIMS_MS[name]
        results[name] = row
    return {
        "benchmark": "overhead",
        "what": "fresh process per call, interleaved rounds; an applied profile",
        "profile": profile,
        "rounds": rounds,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "kvenv_command": k,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="an applied profile (name or .toml)")
    parser.add_argument("--kvenv", help="the kvenv console script to time")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "overhead.json")
    args = parser.parse_args(argv)
    data = measure(_kvenv(args.kvenv), args.profile, args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    results = data["results"]
    assert isinstance(results, dict)
    print(f"{'case':<28} {'median ms':>10} {'vs bare':>8}  aim")
    for name, row in results.items():
        aim = (
            f"{row['aim_ms']:.0f} ms {'met' if row['aim_met'] else 'MISSED'}"
            if "aim_ms" in row
            else ""
        )
        print(f"{name:<28} {row['median_ms']:>10.1f} {row['ratio_to_bare']:>7.1f}x  {aim}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
