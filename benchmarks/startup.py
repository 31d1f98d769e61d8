"""The short commands users repeat, each as a fresh process, against bare Python (issue 13):
``--version``, ``validate``, ``activate``, ``plan``, ``status``, ``lock --check``, a no-op
``apply`` and a no-op ``apply --from BUNDLE``. Several kvenv installs (e.g. the commit before a
change and after it) are timed in the same run, interleaved round by round, medians reported:
``--kvenv LABEL=PATH`` once per install.

Each install gets its own runtime root and cache, and the project is applied there first, so
``apply`` is the no-op it measures; the host interpreter is the install's own
(``$KVENV_PYTHON``), probed in process, as in an activated virtual environment. The project is
the tests' local project (``tests.support.applyenv.local_project``: a native wheel and a helper
overlay, a ``[target]`` that is this machine), so run this from the repository root.

    python benchmarks/startup.py --kvenv after=/venv/bin/kvenv [--kvenv before=...]
        [--rounds 15] [--out benchmarks/results/startup.json]

Aims (issue 13), above bare Python: no-op apply 50 ms (with and without ``--from``); plan,
status and ``lock --check`` 100 ms; activate and validate 40 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import python_of, run_facts, write_results

REPO = Path(__file__).resolve().parent.parent
AIMS_ABOVE_BARE_MS = {
    "apply (no-op)": 50.0,
    "apply --from (no-op)": 50.0,
    "plan": 100.0,
    "status": 100.0,
    "lock --check": 100.0,
    "activate": 40.0,
    "validate": 40.0,
}


def _project(work: Path) -> Path:
    sys.path.insert(0, str(REPO))
    from apply_cli import portable_lock  # beside this script

    from tests.support.applyenv import local_project

    project = local_project(work / "proj")
    loaded = project.loaded()
    lock = project.lock_path.read_text(encoding="utf-8")
    project.lock_path.write_text(lock.replace("sha256:tests", loaded.digest), encoding="utf-8")
    portable_lock(project.lock_path)
    return project.profile_path


def _instructions(command: list[str], env: dict[str, str]) -> int:
    """Instructions executed by ``command`` (callgrind's ``refs``), after one run under
    valgrind that lets the command record what a repeat recalls (valgrind's own environment
    variables are part of what the host memo keys)."""
    subprocess.run(["valgrind", "--tool=none", *command], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in done.stderr.splitlines():
        if "refs:" in line:
            return int(line.split("refs:")[1].strip().replace(",", ""))
    raise SystemExit(f"no instruction count from valgrind for {command}: {done.stderr[-500:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/startup.json")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (to profile a command in it)"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each command's instructions under valgrind (callgrind): a figure the "
        "machine's load and CPU steal do not change",
    )
    args = parser.parse_args()
    kvenvs = {}
    for item in args.kvenv:
        label, _, path = item.partition("=")
        kvenvs[label] = Path(path).absolute()
    work = Path(tempfile.mkdtemp(prefix="kvenv-startup-"))
    profile = str(_project(work))
    bundle = work / "bundle"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    envs = {
        label: dict(
            base,
            KVENV_ROOT=str(work / f"root-{label}"),
            KVENV_CACHE_DIR=str(work / f"cache-{label}"),
            KVENV_PYTHON=python_of(path),
        )
        for label, path in kvenvs.items()
    }
    first = next(iter(kvenvs))
    wheels = str(Path(profile).parent.parent / "wheels")
    subprocess.run(  # a real lock, so `lock --check` times a check that passes
        [str(kvenvs[first]), "lock", profile, "--find-links", wheels, "--no-index"],
        env=envs[first],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [str(kvenvs[first]), "bundle", profile, "-o", str(bundle)],
        env=envs[first],
        check=True,
        capture_output=True,
    )
    cases = {
        "python -c pass": None,
        "--version": ["--version"],
        "validate": ["validate", "demo"],
        "activate": ["activate", profile, "--shell", "bash"],
        "plan": ["plan", profile],
        "status": ["status", profile],
        "lock --check": ["lock", "--check", profile],
        "apply (no-op)": ["apply", profile],
        "apply --from (no-op)": ["apply", "--offline", "--from", str(bundle), profile],
    }
    for label, path in kvenvs.items():  # apply, then check that each case runs
        subprocess.run([str(path), "apply", profile], env=envs[label], check=True,
                       capture_output=True)  # fmt: skip
        for argv in cases.values():
            if argv is None:
                continue
            done = subprocess.run([str(path), *argv], env=envs[label], capture_output=True)
            if (
                done.returncode not in (0, 1)
                or (argv[0] == "apply" and b"up to date" not in done.stdout)
                or (argv[:2] == ["lock", "--check"] and done.returncode != 0)
            ):
                raise SystemExit(
                    f"{label}: kvenv {' '.join(argv)}: {done.stdout!r} {done.stderr!r}"
                )
    samples: dict[tuple[str, str], list[float]] = {}
    for number in range(args.rounds):
        order = list(kvenvs) if number % 2 == 0 else list(reversed(kvenvs))
        for name, argv in cases.items():
            for label in order:
                command = (
                    [python_of(kvenvs[label]), "-c", "pass"]
                    if argv is None
                    else [str(kvenvs[label]), *argv]
                )
                start = time.perf_counter()
                subprocess.run(command, env=envs[label], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
                samples.setdefault((label, name), []).append(time.perf_counter() - start)
    results: dict[str, dict[str, dict[str, float | bool]]] = {}
    for label in kvenvs:
        bare = statistics.median(samples[(label, "python -c pass")]) * 1000
        rows: dict[str, dict[str, float | bool]] = {}
        for name in cases:
            median = statistics.median(samples[(label, name)]) * 1000
            row: dict[str, float | bool] = {
                "median_ms": round(median, 1),
                "above_bare_ms": round(median - bare, 1),
            }
            if name in AIMS_ABOVE_BARE_MS:
                row["aim_above_bare_ms"] = AIMS_ABOVE_BARE_MS[name]
                row["aim_met"] = median - bare <= AIMS_ABOVE_BARE_MS[name]
            rows[name] = row
        results[label] = rows
    if args.instructions:
        for label, path in kvenvs.items():
            bare_ir = _instructions([python_of(path), "-c", "pass"], envs[label])
            for name, argv in cases.items():
                command = [python_of(path), "-c", "pass"] if argv is None else [str(path), *argv]
                ir = bare_ir if argv is None else _instructions(command, envs[label])
                results[label][name]["instructions_above_bare_m"] = round((ir - bare_ir) / 1e6, 1)
    data = {
        "benchmark": "startup",
        "what": "fresh process per call, installs and commands interleaved; an applied root",
        "rounds": args.rounds,
        "kvenv": {label: str(path) for label, path in kvenvs.items()},
        **run_facts(),
        "results": results,
    }
    write_results(args.out, data)
    labels = list(kvenvs)
    print(f"{'command':<22}" + "".join(f"{label + ' ms (+bare)':>24}" for label in labels))
    for name in cases:
        rows_of = [results[label][name] for label in labels]
        cells = "".join(f"{r['median_ms']:>14.1f} ({r['above_bare_ms']:+6.1f})" for r in rows_of)
        if args.instructions:
            cells += "".join(f"{r['instructions_above_bare_m']:>10.1f} M" for r in rows_of)
        print(f"{name:<22}{cells}")
    if args.keep:
        print(f"kept {work} (profile {profile}, bundle {bundle})")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
