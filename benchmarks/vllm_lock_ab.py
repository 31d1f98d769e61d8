"""``kvenv lock`` of the vLLM 0.31.0 closure, cold and warm-online, for two kvenv installs and uv
in the same run, alternating within each round (issue 13, lock round 2).

    python benchmarks/vllm_lock_ab.py --project DIR --kvenv before=VENV --kvenv after=VENV
        [--rounds N] [--output PATH]

The work is ``vllm_closure.py``'s lock half (same profile, same uv command): cold = an empty
cache directory, warm = the cache of the previous round (kvenv within its page freshness, uv
revalidating). Each round runs every tool cold, then every tool warm, in a rotated order; each
sample records wall and CPU (user + sys) seconds, since on a shared machine the CPU a lock
needs is the steadier figure. The lock files each kvenv writes are compared: they must be
identical. Writes JSON (default ``benchmarks/results/vllm-lock-13b.json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import run_child  # noqa: E402
from vllm_closure import TORCH_FAMILY, _env, _target, _uv  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--profile", default="e2e-cpu")
    parser.add_argument("--kvenv", action="append", required=True, help="LABEL=VENV")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "vllm-lock-13b.json")
    args = parser.parse_args(argv)
    tools = dict(item.split("=", 1) for item in args.kvenv)
    target = _target(args.project, args.profile)
    profile = str(args.project / "profiles" / f"{args.profile}.toml")
    env = _env()
    with tempfile.TemporaryDirectory(prefix="kvenv-lock-ab-") as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text(target["native"] + "\n", encoding="utf-8")
        overrides = "".join(f"{n}; sys_platform == 'never'\n" for n in TORCH_FAMILY)
        (work / "overrides.txt").write_text(overrides, encoding="utf-8")

        def command(label: str, cache: Path) -> list[str]:
            if label == "uv":
                return [
                    _uv(), "pip", "compile", str(work / "requirements.in"),
                    "--override", str(work / "overrides.txt"),
                    "--python-version", target["python"], "--python-platform", target["platform"],
                    "--generate-hashes", "--cache-dir", str(cache), "-q",
                    "-o", str(work / "uv.txt"),
                ]  # fmt: skip
            kvenv = str(Path(tools[label]) / "bin" / "kvenv")
            out = work / f"pylock.{label}.toml"
            return [kvenv, "lock", profile, "--fresh", "--cache-dir", str(cache), "-o", str(out)]

        labels = [*tools, "uv"]
        samples: dict[str, list[dict[str, float]]] = {}

        def run(label: str, kind: str, cache: Path) -> None:
            proc = run_child(command(label, cache), env, args.project)
            if proc.returncode != 0:
                raise SystemExit(f"{label} {kind} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
            samples.setdefault(f"{label} {kind}", []).append(
                {"wall_s": round(proc.wall, 3), "cpu_s": round(proc.cpu, 3)}
            )

        for label in labels:  # fill the warm caches
            run_child(command(label, work / f"warm-{label}"), env, args.project)
        for i in range(args.rounds):
            order = labels[i % len(labels) :] + labels[: i % len(labels)]
            for label in order:
                cold = work / f"cold-{label}-{i}"
                run(label, "cold", cold)
                shutil.rmtree(cold, ignore_errors=True)
            for label in order:
                run(label, "warm", work / f"warm-{label}")
        locks = {label: (work / f"pylock.{label}.toml").read_text() for label in tools}
    results = {
        key: {
            "median_wall_s": statistics.median(s["wall_s"] for s in runs),
            "median_cpu_s": statistics.median(s["cpu_s"] for s in runs),
            "samples": runs,
        }
        for key, runs in samples.items()
    }
    ratios = {
        f"{label} {kind} / uv": round(
            results[f"{label} {kind}"]["median_wall_s"] / results[f"uv {kind}"]["median_wall_s"], 2
        )
        for label in tools
        for kind in ("cold", "warm")
    }
    data: dict[str, Any] = {
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "target": target,
        "rounds": args.rounds,
        "kvenv": tools,
        "locks identical": len(set(locks.values())) == 1,
        "results": results,
        "wall ratios": ratios,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in data.items() if k != "results"}, indent=2))
    for key, value in results.items():
        print(f"{key:24s} wall {value['median_wall_s']:6.2f} s  cpu {value['median_cpu_s']:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
