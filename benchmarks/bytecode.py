"""Bytecode in the store (issue 25): what a cold ``kvenv apply`` pays to compile every wheel
once, and what every later ``import`` saves, on a machine that sets ``PYTHONDONTWRITEBYTECODE``.

- **apply**: ``kvenv apply`` of a project whose overlay is every wheel of ``--wheels DIR`` (the
  lock names them by path, so the "download" is a copy that is hashed), an empty cache and a
  fresh root each round, with bytecode (the default) and with ``--no-compile``; ``uv pip
  install --target --no-deps`` of the same files cold, with and without ``--compile-bytecode``,
  for reference. The rounds alternate the order. Wall and CPU (user + sys of the command and of
  the processes it waited for: the compiling interpreters) are the children's own.
- **import**: ``python -c "import MODULE"`` with the generation's two layers on
  ``PYTHONPATH`` and ``PYTHONDONTWRITEBYTECODE=1``, from a generation with bytecode and one
  without, alternating; also from uv's ``--compile-bytecode`` target.

    python benchmarks/bytecode.py --wheels DIR --kvenv /venv/bin/kvenv --import jupyterlab.labapp
        [--uv UV] [--rounds 3] [--import-rounds 7] [--out benchmarks/results/bytecode.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import python_of, run_child, run_facts, tool_version, write_results
from apply_cli import _project

REPO = Path(__file__).resolve().parent.parent


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    done = run_child(command, env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... exited {done.returncode}: {done.stderr}")
    return done.wall, done.cpu


def _layers(root: Path) -> str:
    generation = json.loads((root / "current.json").read_text())["generation"]
    manifest = json.loads((root / "generations" / generation / "manifest.json").read_text())
    return f"{manifest['dirs']['overlay']}:{manifest['dirs']['native']}"


def _row(values: list[tuple[float, float]]) -> dict[str, object]:
    return {
        "wall_s": round(statistics.median(v[0] for v in values), 4),
        "cpu_s": round(statistics.median(v[1] for v in values), 4),
        "rounds": len(values),
        "walls": [round(v[0], 4) for v in values],
        "cpus": [round(v[1], 4) for v in values],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--kvenv", type=Path, required=True)
    parser.add_argument("--import", dest="module", required=True)
    parser.add_argument("--before", type=Path, help="another kvenv (the commit before) to time too")
    parser.add_argument("--skip-import", action="store_true", help="time the applies only")
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--import-rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/bytecode.json")
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob("*.whl"))
    work = Path(tempfile.mkdtemp(prefix="kvenv-bytecode-"))
    profile = _project(work, wheels)
    python = python_of(args.kvenv)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    base["PYTHONDONTWRITEBYTECODE"] = "1"
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> Path:
        return work / f"{kind}-{next(counter)}"

    roots: dict[str, Path] = {}

    def kvenv(label: str, *flags: str, exe: Path | None = None) -> tuple[list[str], dict[str, str]]:
        root = fresh("root")
        roots[label] = root
        env = dict(base, KVENV_ROOT=str(root), KVENV_CACHE_DIR=str(fresh("cache")))
        env["KVENV_PYTHON"] = python
        return [str(exe or args.kvenv), "apply", str(profile), *flags], env

    targets: dict[str, Path] = {}

    def uv(label: str, *flags: str) -> tuple[list[str], dict[str, str]]:
        target = fresh("uvt")
        targets[label] = target
        command = [args.uv, "pip", "install", "--no-deps", "--target", str(target),
                   "--cache-dir", str(fresh("uvcache")), "--python", python, "--offline",
                   "--link-mode", "hardlink", "--quiet", *flags, *map(str, wheels)]  # fmt: skip
        return command, base

    for path in wheels:  # the page cache, once, for everyone
        path.read_bytes()
    samples: dict[str, list[tuple[float, float]]] = {}
    for number in range(args.rounds):
        jobs = [
            ("kvenv apply (bytecode)", lambda: kvenv("compiled")),
            ("kvenv apply --no-compile", lambda: kvenv("plain", "--no-compile")),
        ]
        if args.before:
            jobs.append(("kvenv[before] apply", lambda: kvenv("before", exe=args.before)))
        if args.uv:
            jobs += [
                ("uv --compile-bytecode", lambda: uv("compiled", "--compile-bytecode")),
                ("uv", lambda: uv("plain")),
            ]
        if number % 2:
            jobs.reverse()
        for name, make in jobs:
            command, env = make()
            samples.setdefault(name, []).append(_timed(command, env))
        print(f"apply round {number + 1}/{args.rounds} done", file=sys.stderr)
    paths = {
        "kvenv generation with bytecode": _layers(roots["compiled"]),
        "kvenv generation without bytecode": _layers(roots["plain"]),
    }
    if args.uv:
        paths["uv --compile-bytecode target"] = str(targets["compiled"])
    imports: dict[str, list[tuple[float, float]]] = {}
    for number in range(0 if args.skip_import else args.import_rounds):
        order = list(paths.items())
        if number % 2:
            order.reverse()
        for name, pythonpath in order:
            env = dict(base, PYTHONPATH=pythonpath)
            imports.setdefault(name, []).append(
                _timed([python, "-c", f"import {args.module}"], env)
            )
    apply_rows = {name: _row(values) for name, values in samples.items()}
    import_rows = {name: _row(values) for name, values in imports.items()}

    def median(name: str, index: int) -> float:
        return statistics.median(v[index] for v in samples[name])

    extra_cpu = median("kvenv apply (bytecode)", 1) - median("kvenv apply --no-compile", 1)
    extra_wall = median("kvenv apply (bytecode)", 0) - median("kvenv apply --no-compile", 0)
    data = {
        "benchmark": "bytecode",
        "what": "cold kvenv apply with and without bytecode; import from the generation",
        "wheels": len(wheels),
        "wheel_bytes": sum(p.stat().st_size for p in wheels),
        "module": args.module,
        "kvenv": str(args.kvenv),
        "uv": tool_version(args.uv),
        **run_facts(),
        "apply": apply_rows,
        "import": import_rows,
        "extra_apply_cpu_s": round(extra_cpu, 4),
        "extra_apply_wall_s": round(extra_wall, 4),
    }
    write_results(args.out, data)
    for group, rows in (("apply", apply_rows), ("import", import_rows)):
        for name, row in rows.items():
            print(f"{group:<7} {name:<36} wall {row['wall_s']:8.3f} s  cpu {row['cpu_s']:8.3f} s")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
