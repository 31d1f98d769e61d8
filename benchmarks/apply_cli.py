"""``kvenv apply --from BUNDLE`` through the command line, as users run it, against ``uv pip
install --target`` and ``pip install --target`` of the same wheels, cold and warm, in one run
(issue 13). Several kvenv installs (e.g. the commit before a change and after it) can be timed
in the same run: ``--kvenv LABEL=PATH`` once per install.

- **cold**: an empty kvenv cache and store (kvenv), an empty uv cache (uv); pip has no unpack
  cache and is always cold. A fresh root / target each time.
- **warm**: the cache and store filled by that tool's previous run (for kvenv: the wheels
  verified and unpacked, the bundle verified once); a fresh root / target each time.

The project is built here: a native wheel and its helper (as in the tests'
``tests.support.applyenv``) with every wheel of ``--wheels DIR`` in the overlay lock, bundled
once with the first kvenv (``kvenv bundle``). kvenv runs with every check on (bundle checked
against SHA256SUMS, wheel sha256 pins, RECORD checked at unpack, the seal of every store entry
before it is linked, protected names, ``.pth`` policy) and writes a full generation (manifest,
activation scripts); uv and pip install the same wheels with ``--no-deps``, offline, without
bytecode (``--no-compile`` for pip), uv hard-linking from its cache, and kvenv with
``--no-compile`` (it compiles bytecode into the store by default since issue 25; a kvenv
without that flag is run as it is). ``--bytecode`` compares the tools with bytecode instead:
kvenv's default, uv's ``--compile-bytecode``, pip's default. The rounds alternate the
tools' order; wall, CPU (user + sys of the child) and peak RSS (the child's own, from
``os.wait4``) medians are reported, with ratios.

    python benchmarks/apply_cli.py --wheels DIR --kvenv after=/venv/bin/kvenv
        [--kvenv before=/other/bin/kvenv] [--uv UV] [--rounds 5] [--cold-rounds 3]
        [--pip-rounds 1] [--bytecode] [--out benchmarks/results/apply-cli.json]

Run from the repository root (the project is built with ``tests.support``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import python_of, run_child, run_facts, tool_version, write_results

REPO = Path(__file__).resolve().parent.parent


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float, float, float]:
    """Wall, CPU (user + sys) and user CPU seconds and peak RSS (MiB) of one child process."""
    done = run_child(command, env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... exited {done.returncode}: {done.stderr}")
    return done.wall, done.cpu, done.max_rss_mib, done.user


def _help(kvenv: Path, env: dict[str, str]) -> str:
    """``kvenv apply --help``: which flags this install has."""
    done = subprocess.run(
        [str(kvenv), "apply", "--help"], env=env, capture_output=True, text=True, check=False
    )
    return done.stdout


def _project(work: Path, wheels: list[Path]) -> Path:
    """profiles/t.toml + locks/pylock.t.toml: the native wheel, its helper and ``wheels``."""
    sys.path.insert(0, str(REPO))
    from tests.support.applyenv import LOCAL_TARGET, helper_wheel, native_wheel, write_project

    built = work / "proj" / "wheels"
    for wheel in wheels:
        built.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, built / wheel.name)
    overlay = [helper_wheel(built), *(built / w.name for w in wheels)]
    project = write_project(
        work / "proj",
        native=native_wheel(built),
        overlay=overlay,
        target=LOCAL_TARGET + f'glibc = "{platform.libc_ver()[1]}"\n',  # manylinux wheels fit
    )
    portable_lock(project.lock_path)
    return project.profile_path


def portable_lock(lock: Path) -> None:
    """Rewrite a ``tests.support`` lock so that every kvenv version reads it: the names of
    ``[[packages]]`` normalized, and the native wheel's own package entry left out (kvenv
    versions before it was recorded there refuse the unknown key)."""
    from packaging.utils import canonicalize_name

    blocks = lock.read_text(encoding="utf-8").split("\n\n")
    kept = []
    for block in blocks:
        lines = block.split("\n")
        if lines[0] == "[[packages]]" and lines[1].startswith("name = "):
            name = canonicalize_name(lines[1][8:-1])
            if name == "nativepkg":
                lines = lines[lines.index("[tool.kvenv]") :] if "[tool.kvenv]" in lines else []
            else:
                lines[1] = f'name = "{name}"'
        kept.append("\n".join(lines))
    lock.write_text("\n\n".join(kept), encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--rounds", type=int, default=5, help="warm rounds")
    parser.add_argument("--cold-rounds", type=int, default=3)
    parser.add_argument("--pip-rounds", type=int, default=1)
    parser.add_argument(
        "--bytecode", action="store_true", help="every tool compiles bytecode (default: none does)"
    )
    parser.add_argument("--tmp", type=Path, help="where the work goes (also every tool's TMPDIR)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/apply-cli.json")
    args = parser.parse_args()
    kvenvs = {}
    for item in args.kvenv:
        label, _, path = item.partition("=")
        kvenvs[label] = Path(path).resolve()
    wheels = sorted(args.wheels.glob("*.whl"))
    work = Path(tempfile.mkdtemp(prefix="kvenv-apply-cli-", dir=args.tmp))
    profile = _project(work, wheels)
    first = next(iter(kvenvs.values()))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))}
    if args.tmp is not None:  # every tool's scratch files on the same file system as its target
        base_env["TMPDIR"] = str(args.tmp)  # (pip --target builds in a temporary directory)
    bundle = work / "bundle"
    setup_env = dict(base_env, KVENV_CACHE_DIR=str(work / "bundle-cache"))
    _timed([str(first), "bundle", str(profile), "-o", str(bundle)], setup_env)
    files = sorted((bundle / "wheels").glob("*.whl"))
    for path in files:  # the page cache, once, for everyone
        path.read_bytes()
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> Path:
        return work / f"{kind}-{next(counter)}"

    no_compile = {  # like with like: no bytecode unless --bytecode (see the module)
        label: not args.bytecode and "--no-compile" in _help(path, base_env)
        for label, path in kvenvs.items()
    }

    def kvenv_run(label: str, cache: Path) -> list[str]:
        command = [str(kvenvs[label]), "apply", "--offline", "--from", str(bundle)]
        return command + ["--no-compile"] * no_compile[label]

    def kvenv_env(label: str, cache: Path) -> dict[str, str]:
        python = python_of(kvenvs[label])
        return dict(base_env, KVENV_ROOT=str(fresh("root")), KVENV_CACHE_DIR=str(cache),
                    KVENV_PYTHON=python)  # fmt: skip

    def uv_run(cache: Path) -> list[str]:
        return [args.uv, "pip", "install", "--no-deps", "--target", str(fresh("uvt")),
                "--cache-dir", str(cache), "--python", sys.executable, "--offline",
                "--link-mode", "hardlink", "--quiet",
                *["--compile-bytecode"] * args.bytecode, *map(str, files)]  # fmt: skip

    def pip_run() -> list[str]:
        return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                *["--no-compile"] * (not args.bytecode),
                "--target", str(fresh("pipt")), *map(str, files)]  # fmt: skip

    samples: dict[str, list[tuple[float, float, float, float]]] = {}

    def record(name: str, command: list[str], env: dict[str, str]) -> None:
        samples.setdefault(name, []).append(_timed(command, env))

    warm_caches = {label: fresh("kcache") for label in kvenvs}
    uv_warm = fresh("uvcache")
    for label, cache in warm_caches.items():  # fill the warm caches (not timed)
        _timed(kvenv_run(label, cache), kvenv_env(label, cache))
    if args.uv:
        _timed(uv_run(uv_warm), base_env)
    rounds = max(args.rounds, args.cold_rounds, args.pip_rounds)
    for number in range(rounds):
        jobs: list[tuple[str, list[str], dict[str, str]]] = []
        for label in kvenvs:
            if number < args.rounds:
                cache = warm_caches[label]
                jobs.append(
                    (f"kvenv[{label}] warm", kvenv_run(label, cache), kvenv_env(label, cache))
                )
            if number < args.cold_rounds:
                cache = fresh("kcold")
                jobs.append(
                    (f"kvenv[{label}] cold", kvenv_run(label, cache), kvenv_env(label, cache))
                )
        if args.uv and number < args.rounds:
            jobs.append(("uv warm", uv_run(uv_warm), base_env))
        if args.uv and number < args.cold_rounds:
            jobs.append(("uv cold", uv_run(fresh("uvcold")), base_env))
        if number < args.pip_rounds:
            jobs.append(("pip", pip_run(), base_env))
        if number % 2:
            jobs.reverse()
        for name, command, env in jobs:
            record(name, command, env)
        print(f"round {number + 1}/{rounds} done", file=sys.stderr)
    results = {
        name: {
            "wall_s": round(statistics.median(v[0] for v in values), 4),
            "cpu_s": round(statistics.median(v[1] for v in values), 4),
            "user_cpu_s": round(statistics.median(v[3] for v in values), 4),
            "max_rss_mib": round(statistics.median(v[2] for v in values), 1),
            "rounds": len(values),
            "walls": [round(v[0], 4) for v in values],
            "max_rss_mibs": [round(v[2], 1) for v in values],
        }
        for name, values in samples.items()
    }
    # the apply benchmarks' shape (benchmarks/make_charts.py: one wall and one CPU group)
    medians: dict[str, dict[str, float]] = {}
    cpu_medians: dict[str, dict[str, float]] = {}
    rss_medians: dict[str, dict[str, float]] = {}
    for name, row in results.items():
        tool, _, kind = name.rpartition(" ") if name != "pip" else ("pip", "", "cold")
        medians.setdefault(kind, {})[tool] = row["wall_s"]
        cpu_medians.setdefault(kind, {})[tool] = row["cpu_s"]
        rss_medians.setdefault(kind, {})[tool] = row["max_rss_mib"]
    ratios: dict[str, float] = {}
    for label in kvenvs:
        for kind in ("warm", "cold"):
            mine = results.get(f"kvenv[{label}] {kind}")
            uv = results.get(f"uv {kind}")
            if mine and uv:
                ratios[f"kvenv[{label}]/uv {kind}"] = round(mine["wall_s"] / uv["wall_s"], 2)
                ratios[f"kvenv[{label}]/uv {kind} peak RSS"] = round(
                    mine["max_rss_mib"] / uv["max_rss_mib"], 2
                )
            if mine and "pip" in results and kind == "cold":
                ratios[f"pip/kvenv[{label}] cold"] = round(
                    results["pip"]["wall_s"] / mine["wall_s"], 2
                )
    data = {
        "benchmark": "apply-cli",
        "what": "kvenv apply --offline --from BUNDLE vs uv/pip install --target, one run",
        "wheels": len(files),
        "bundle_bytes": sum(p.stat().st_size for p in files),
        "kvenv": {label: str(path) for label, path in kvenvs.items()},
        "uv": tool_version(args.uv),
        "bytecode": bool(args.bytecode),
        "kvenv_no_compile": no_compile,
        **run_facts(),
        "median_seconds": medians,
        "median_cpu_seconds": cpu_medians,
        "median_max_rss_mib": rss_medians,
        "samples": results,
        "ratios": ratios,
    }
    write_results(args.out, data)
    for name, row in results.items():
        print(
            f"{name:<24} wall {row['wall_s']:8.3f} s  cpu {row['cpu_s']:8.3f} s  "
            f"(user {row['user_cpu_s']:6.3f} s)  peak RSS {row['max_rss_mib']:7.1f} MiB"
        )
    for name, value in ratios.items():
        print(f"{name:<28} {value}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
