"""The vLLM 0.31.0 closure: ``kvenv lock`` against ``uv pip compile`` (cold and warm caches),
and installing the locked overlay with ``kvenv apply`` against ``uv pip install --target
--no-deps`` and ``pip install --target --no-deps`` (same wheel files, same run).

    python benchmarks/vllm_closure.py --project DIR --host-venv DIR [--profile NAME]
        [--rounds N] [--pip-rounds N] [--only lock|apply|apply-cold|apply-warm]
        [--kvenv LABEL=PATH ...] [--tmp DIR] [--output PATH]

``--kvenv`` times several kvenv installs side by side (e.g. the commit before a change and
after it; default: the host venv's own); ``--tmp`` puts the work (and every tool's TMPDIR)
there, e.g. on tmpfs, where the kernel's share is small and each tool's own work decides.

It runs on what the end-to-end test leaves when ``KVENV_E2E_WORKDIR`` keeps it (see
docs/testing.md): ``--project`` holds ``profiles/<NAME>.toml``, its host snapshot and lock;
``--host-venv`` is the host with CPU torch and kvenv; the profile must have been applied once
with ``$KVENV_CACHE_DIR`` set, so that cache holds every artifact (``--kvenv-cache``, default
``$KVENV_CACHE_DIR``).

Lock, same work for both: the native wheel's requirements for the profile's target (CPython
3.11, manylinux glibc of the profile, x86_64) with sha256 hashes; the torch family is the host's
(kvenv: protected and waived; uv: overridden away with a never-true marker). kvenv also reuses
the host's other distributions, which uv has no way to know. Cold = an empty cache directory
per round; warm = the cache of the previous round (uv revalidates its index pages; kvenv uses
its cached pages).

Apply: kvenv warm = artifacts and unpacked store cached, a new runtime root per round; kvenv
cold store = artifacts cached, the store empty (every wheel unpacked); uv warm = its cache
warm, a new target per round; uv cold = an empty uv cache per round; pip = no cache to speak
of for local files, ``--no-compile`` (neither kvenv nor uv writes bytecode). Aims (issue 7):
lock warm no slower than uv and cold within 1.5x; apply no slower than uv cold and warm and at
least 5x faster than pip. Writes JSON (default ``benchmarks/results/vllm_closure.json``).
"""

from __future__ import annotations

import argparse
import functools
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import run_child  # noqa: E402

TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "torchcodec")
_STRIPPED = ("PIP_", "UV_", "KVENV_", "VIRTUAL_ENV")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED)}
    env.update(extra)
    return env


def _run(
    argv: list[str], env: dict[str, str], cwd: Path | None = None, into: list[Any] | None = None
) -> float:
    """Wall seconds of one child; ``into`` also gets its ``_common.ChildRun`` (CPU, peak RSS)."""
    proc = run_child(argv, env, cwd)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv[:6])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    if into is not None:
        into.append(proc)
    return float(proc.wall)


def _uv() -> str:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.is_file() else (shutil.which("uv") or "uv")


def _summary(samples: dict[str, list[float]]) -> dict[str, dict[str, float | int]]:
    return {
        name: {
            "median_s": round(statistics.median(values), 3),
            "min_s": round(min(values), 3),
            "max_s": round(max(values), 3),
            "rounds": len(values),
        }
        for name, values in samples.items()
        if values
    }


def _ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    if a in results and b in results and results[b]["median_s"]:
        return round(float(results[a]["median_s"]) / float(results[b]["median_s"]), 2)
    return None


def _rss_ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float | None:
    if a in results and b in results and results[b].get("max_rss_mib"):
        return round(float(results[a]["max_rss_mib"]) / float(results[b]["max_rss_mib"]), 2)
    return None


def _read_lock(path: Path) -> dict[str, Any]:
    from kvenv._util import tomlio

    return tomlio.read(path)


def _target(project: Path, profile: str) -> dict[str, str]:
    from kvenv._util import tomlio

    data = tomlio.read(project / "profiles" / f"{profile}.toml")
    target = data["target"]
    glibc = str(target["glibc"]).replace(".", "_")
    return {
        "python": ".".join(str(target["python"]).split(".")[:2]),
        "platform": f"{target.get('machine', 'x86_64')}-manylinux_{glibc}",
        "native": f"{data['native']['name']}=={data['native']['version']}",
    }


# -- lock --------------------------------------------------------------------------------------


def bench_lock(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kvenv = str(args.host_venv / "bin" / "kvenv")
    profile = str(args.project / "profiles" / f"{args.profile}.toml")
    target = _target(args.project, args.profile)
    (work / "requirements.in").write_text(target["native"] + "\n", encoding="utf-8")
    overrides = "".join(f"{n}; sys_platform == 'never'\n" for n in TORCH_FAMILY)
    (work / "overrides.txt").write_text(overrides, encoding="utf-8")
    env = _env()
    warm_k, warm_u = work / "kvenv-lock-warm", work / "uv-lock-warm"

    def kvenv_lock(cache: Path) -> list[str]:
        out = work / "pylock.bench.toml"
        return [kvenv, "lock", profile, "--fresh", "--cache-dir", str(cache), "-o", str(out)]

    def uv_compile(cache: Path) -> list[str]:
        return [
            _uv(), "pip", "compile", str(work / "requirements.in"),
            "--override", str(work / "overrides.txt"),
            "--python-version", target["python"], "--python-platform", target["platform"],
            "--generate-hashes", "--cache-dir", str(cache), "-q",
            "-o", str(work / "uv.requirements.txt"),
        ]  # fmt: skip

    samples: dict[str, list[float]] = {
        "kvenv lock (cold)": [],
        "uv pip compile (cold)": [],
        "kvenv lock (warm)": [],
        "uv pip compile (warm)": [],
    }
    _run(kvenv_lock(warm_k), env, args.project)
    _run(uv_compile(warm_u), env)
    for i in range(args.rounds):
        cold_k, cold_u = work / f"kvenv-cold-{i}", work / f"uv-cold-{i}"
        samples["kvenv lock (cold)"].append(_run(kvenv_lock(cold_k), env, args.project))
        samples["uv pip compile (cold)"].append(_run(uv_compile(cold_u), env))
        shutil.rmtree(cold_k, ignore_errors=True)
        shutil.rmtree(cold_u, ignore_errors=True)
        samples["kvenv lock (warm)"].append(_run(kvenv_lock(warm_k), env, args.project))
        samples["uv pip compile (warm)"].append(_run(uv_compile(warm_u), env))
    results = _summary(samples)
    kv_names = {p["name"] for p in _read_lock(work / "pylock.bench.toml")["packages"]}
    uv_text = (work / "uv.requirements.txt").read_text(encoding="utf-8")
    uv_names = {
        line.split("==")[0].strip()
        for line in uv_text.splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    return {
        "target": target,
        "packages": {"kvenv": len(kv_names), "uv": len(uv_names)},
        "results": results,
        "ratios": {
            "cold kvenv/uv": _ratio(results, "kvenv lock (cold)", "uv pip compile (cold)"),
            "warm kvenv/uv": _ratio(results, "kvenv lock (warm)", "uv pip compile (warm)"),
        },
        "aims": {"cold kvenv/uv": "<= 1.5", "warm kvenv/uv": "<= 1.0"},
    }


# -- apply -------------------------------------------------------------------------------------


def _artifact(cache: Path, sha256: str) -> Path:
    entry = cache / "artifacts-v1" / "sha256" / sha256[:2] / sha256
    files = [p for p in entry.iterdir() if not p.name.startswith(".")] if entry.is_dir() else []
    if len(files) != 1:
        raise SystemExit(f"artifact {sha256} is not in {cache}: apply the profile once first")
    return files[0]


def _overlay_files(args: argparse.Namespace, into: Path) -> list[Path]:
    """Copies of the exact files kvenv installs: the native wheel and every locked wheel.
    Copies, not hard links: the cold-store case hard-links kvenv's cache, which changes the
    files' ctime, and uv keys its cache of a local wheel on it (every round would be cold)."""
    from kvenv._util import tomlio

    lock = _read_lock(args.project / "locks" / f"pylock.{args.profile}.toml")
    profile = tomlio.read(args.project / "profiles" / f"{args.profile}.toml")
    shas = [profile["native"]["sha256"]]
    for package in lock["packages"]:
        for wheel in package.get("wheels", []):
            shas.append(wheel["hashes"]["sha256"])
    into.mkdir(parents=True)
    files = []
    for sha in shas:
        source = _artifact(args.kvenv_cache, sha)
        shutil.copyfile(source, into / source.name)
        files.append(into / source.name)
    return files


def _kvenvs(args: argparse.Namespace) -> dict[str, str]:
    """The kvenv installs to time, by label ("" for the host venv's own when none is named)."""
    if not args.kvenv:
        return {"": str(args.host_venv / "bin" / "kvenv")}
    out = {}
    for item in args.kvenv:
        label, _, path = item.partition("=")
        out[label] = path
    return out


def _who(label: str) -> str:
    return f"kvenv{f'[{label}]' if label else ''}"


def _named(label: str, what: str) -> str:
    return f"{_who(label)} apply ({what})"


def bench_apply(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    kvenvs = _kvenvs(args)
    profile = str(args.project / "profiles" / f"{args.profile}.toml")
    files = [str(f) for f in _overlay_files(args, work / "wheels")]
    env = _env(TMPDIR=str(work))  # scratch files beside the targets (pip --target, uv)
    uv_warm = work / "uv-install-warm"
    cold_only, warm_only = args.only == "apply-cold", args.only == "apply-warm"

    def target(name: str, i: int) -> Path:
        return work / f"{name}-{i}"

    # the host is the venv with CPU torch (the environment is stripped, so name it)
    host_python = str(args.host_venv / "bin" / "python")

    def kvenv_warm(kvenv: str, i: int) -> list[str]:
        root, cache = target("kvenv-root", i), args.kvenv_cache
        return [kvenv, "apply", profile, "--offline", "--root", str(root), "--cache", str(cache),
                "--python", host_python]  # fmt: skip

    def kvenv_cold_store(kvenv: str, i: int) -> list[str]:
        cache = target("kvenv-cache", i)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(target("kvenv-root-cold", i), ignore_errors=True)
        cache.mkdir()
        subprocess.run(
            ["cp", "-al", str(args.kvenv_cache / "artifacts-v1"), str(cache / "artifacts-v1")],
            check=True,
        )
        root = target("kvenv-root-cold", i)
        return [kvenv, "apply", profile, "--offline", "--root", str(root), "--cache", str(cache),
                "--python", host_python]  # fmt: skip

    def uv_install(cache: Path, i: int, name: str) -> list[str]:
        shutil.rmtree(target(name, i), ignore_errors=True)
        return [
            _uv(), "pip", "install", "--python", str(args.host_venv / "bin" / "python"),
            "--target", str(target(name, i)), "--no-deps", "--cache-dir", str(cache), "-q",
            *files,
        ]  # fmt: skip

    def uv_cold(i: int) -> list[str]:
        shutil.rmtree(target("uv-cache", i), ignore_errors=True)
        return uv_install(target("uv-cache", i), i, "uvc")

    def pip_install(i: int) -> list[str]:
        return [
            str(args.pip_python), "-m", "pip", "install", "--target", str(target("pip", i)),
            "--no-deps", "--no-index", "--no-compile", "--disable-pip-version-check", "-q",
            *files,
        ]  # fmt: skip

    cases: dict[str, Callable[[int], list[str]]] = {}
    for label, kvenv in kvenvs.items():
        if not cold_only:
            cases[_named(label, "warm cache")] = functools.partial(kvenv_warm, kvenv)
        if not warm_only:
            cases[_named(label, "artifacts cached, store cold")] = functools.partial(
                kvenv_cold_store, kvenv
            )
    if not cold_only:
        cases["uv pip install --target --no-deps (warm cache)"] = lambda i: uv_install(
            uv_warm, i, "uvw"
        )
    if not warm_only:
        cases["uv pip install --target --no-deps (cold cache)"] = uv_cold
    samples: dict[str, list[float]] = {name: [] for name in cases}
    samples["pip install --target --no-deps"] = []
    children: dict[str, list[Any]] = {name: [] for name in samples}
    if not cold_only:
        _run(uv_install(uv_warm, -1, "uvw"), env)  # fill uv's warm cache
        for kvenv in kvenvs.values():
            _run(kvenv_warm(kvenv, -1), env)  # fill kvenv's store
            shutil.rmtree(target("kvenv-root", -1), ignore_errors=True)
    names = list(cases)
    for i in range(args.rounds):
        # the order turns every round, so no tool always runs right after another's clean-up
        for name in names[i % len(names) :] + names[: i % len(names)]:
            argv = cases[name](i)
            samples[name].append(_run(argv, env, into=children[name]))
            for kind in ("kvenv-root", "kvenv-root-cold", "kvenv-cache", "uvw", "uvc", "uv-cache"):
                shutil.rmtree(target(kind, i), ignore_errors=True)
    for i in range(args.pip_rounds):
        pip_name = "pip install --target --no-deps"
        samples[pip_name].append(_run(pip_install(i), env, into=children[pip_name]))
        shutil.rmtree(target("pip", i), ignore_errors=True)
    results = _summary(samples)
    for name, runs in children.items():  # CPU (user + sys) and peak RSS of each child
        if runs and name in results:
            results[name]["cpu_median_s"] = round(statistics.median(r.cpu for r in runs), 3)
            results[name]["user_median_s"] = round(statistics.median(r.user for r in runs), 3)
            results[name]["max_rss_mib"] = round(statistics.median(r.max_rss_mib for r in runs), 1)
    uv_w = "uv pip install --target --no-deps (warm cache)"
    uv_c = "uv pip install --target --no-deps (cold cache)"
    pip = "pip install --target --no-deps"
    ratios: dict[str, float | None] = {}
    for label in kvenvs:
        who = _who(label)
        warm, cold = _named(label, "warm cache"), _named(label, "artifacts cached, store cold")
        ratios.update({
            f"{who} warm / uv warm": _ratio(results, warm, uv_w),
            f"{who} store-cold / uv cold": _ratio(results, cold, uv_c),
            f"pip / {who} warm": _ratio(results, pip, warm),
            f"pip / {who} store-cold": _ratio(results, pip, cold),
            f"{who} store-cold / uv cold, peak RSS": _rss_ratio(results, cold, uv_c),
        })  # fmt: skip
    return {
        "wheels": len(files),
        "bytes": sum(Path(f).stat().st_size for f in files),
        "results": results,
        "ratios": {name: value for name, value in ratios.items() if value is not None},
        "aims": {
            "kvenv warm / uv warm": "<= 1.0",
            "kvenv store-cold / uv cold": "<= 1.0",
            "pip / kvenv warm": ">= 5",
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--host-venv", type=Path, required=True)
    parser.add_argument("--profile", default="e2e-cpu")
    parser.add_argument("--kvenv-cache", type=Path, default=os.environ.get("KVENV_CACHE_DIR"))
    parser.add_argument("--pip-python", type=Path, default=Path(shutil.which("python3") or ""))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pip-rounds", type=int, default=2)
    parser.add_argument("--only", choices=("lock", "apply", "apply-cold", "apply-warm"))
    parser.add_argument(
        "--kvenv", action="append", metavar="LABEL=PATH",
        help="a kvenv to time (repeat for several, e.g. before=... after=...); default: the "
        "host venv's",
    )  # fmt: skip
    parser.add_argument("--tmp", type=Path, help="where the work goes (default: beside --project)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "vllm_closure.json")
    args = parser.parse_args(argv)
    if args.only != "lock" and args.kvenv_cache is None:
        parser.error("--kvenv-cache (or $KVENV_CACHE_DIR) is needed for the apply benchmark")
    data: dict[str, Any] = {}
    if args.output.is_file():  # keep the other half when only one is rerun
        data = json.loads(args.output.read_text(encoding="utf-8"))
    data.update(
        benchmark="vllm_closure",
        python=platform.python_version(),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs",
        taken_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    scratch = args.tmp or args.project.parent
    with tempfile.TemporaryDirectory(prefix="kvenv-vllm-bench-", dir=scratch) as tmp:
        work = Path(tmp)
        if args.only in (None, "lock"):
            (work / "lock").mkdir()
            data["lock"] = bench_lock(args, work / "lock")
            print(json.dumps(data["lock"], indent=2))
        if args.only in (None, "apply", "apply-cold", "apply-warm"):
            key = args.only or "apply"
            (work / "apply").mkdir()
            data[key] = bench_apply(args, work / "apply")
            print(json.dumps(data[key], indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
