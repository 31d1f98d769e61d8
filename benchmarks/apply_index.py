"""A cold ``kvenv apply`` from the index with a portable lock (every wheel located on the
index by file name and sha256, then downloaded) against ``uv pip install --target --no-deps``
of the same hashed pins from the same index, and the locate phase alone, in one run, rounds
alternating (issue 25). Several kvenv installs (e.g. the commit before a change and after it)
are timed side by side: ``--kvenv LABEL=PATH`` once per install.

    python benchmarks/apply_index.py --kvenv after=.venv/bin/kvenv [--kvenv before=...]
        [--require jupyterlab | --lock PYLOCK] [--uv UV] [--pip] [--rounds 3] [--out PATH.json]

``--lock`` times the locate phase alone on an existing portable lock (e.g. a vLLM closure's).

The project (``benchmarks/_common.bench_project``): a native wheel built here that requires
``--require``, for a target that is this interpreter (CPython, x86_64 manylinux of this glibc),
over an empty host snapshot; it is locked once with the first kvenv against the default index
(not timed; the default portable lock: paths, no URLs). Every round starts from empty caches:

- ``locate``: the locate phase alone, in a child of that kvenv's interpreter: every overlay
  wheel of the lock found on the index as ``kvenv apply`` finds it (8 at a time, as apply's
  ``--jobs``), nothing downloaded; an empty page cache.
- ``apply``: ``kvenv apply PROFILE`` into a new root with an empty cache (native from its path,
  every overlay wheel located and downloaded, verified, unpacked, linked); uv: ``uv pip install
  --no-deps --target T --require-hashes -r REQS`` with an empty cache, REQS holding the same
  ``name==version --hash=sha256:…`` pins and the native wheel's path; with ``--pip``, also
  ``pip install --no-deps --target T --require-hashes -r REQS`` with an empty cache (pip
  compiles bytecode, as kvenv does; uv does not by default).

Index environment variables are cleared for every tool (the default index). Medians of wall
and CPU (user + sys of the child) are reported, with ratios. Run from the repository root.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import tomllib
from _common import bench_project, python_of, run_child, run_facts, tool_version, write_results

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The locate phase in a child: the kvenv of that interpreter, whichever API it has.
LOCATE = r"""
import sys, tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from kvenv.lock.sources import IndexConfig
lock, cache = Path(sys.argv[1]), Path(sys.argv[2])
doc = tomllib.loads(lock.read_text())
wanted = [(p["name"], p["wheels"][0]["name"], p["wheels"][0]["hashes"]["sha256"])
          for p in doc["packages"] if not p.get("tool", {}).get("kvenv", {}).get("native")]
urls = IndexConfig().index_urls()
try:
    from kvenv.fetch.locate import Locator
    from kvenv.lock.cache import IndexCache
except ImportError:
    from kvenv.fetch.index import locate_wheel
    def find(item):
        return locate_wheel(item[0], item[1], item[2], index_urls=urls)
    done = None
else:
    locator = Locator(urls, [], IndexCache(cache))
    locator.prefetch(name for name, _, _ in wanted)
    def find(item):
        return locator.locate(*item)
    done = locator.close
with ThreadPoolExecutor(8) as pool:
    found = list(pool.map(find, wanted))
if done is not None:
    done()
assert len(found) == len(wanted)
print(len(found))
"""


def _env(**extra: str) -> dict[str, str]:
    strip = ("PIP_", "UV_", "KVENV_", "VIRTUAL_ENV")
    return dict({k: v for k, v in os.environ.items() if not k.startswith(strip)}, **extra)


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _groups(results: dict[str, dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """``{"locate": {"kvenv[after]": 1.1, ...}, "apply cold": {...}}``: the apply benchmarks'
    shape (``benchmarks/make_charts.py``)."""
    out: dict[str, dict[str, float]] = {}
    for name, row in results.items():
        phase, _, tool = name.partition(" ")
        group = {"locate": "locate", "apply-nocompile": "apply cold, no bytecode"}.get(phase)
        group = group or {"apply-compile": "apply cold, bytecode"}.get(phase, "apply cold")
        out.setdefault(group, {})[tool] = row[key]
    return out


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    done = run_child(command, env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... exited {done.returncode}: {done.stderr}")
    return done.wall, done.cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kvenv", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--require", default="jupyterlab")
    parser.add_argument("--uv", default=shutil.which("uv"))
    parser.add_argument("--pip", action="store_true", help="time pip install --target too")
    parser.add_argument(
        "--both-bytecode",
        action="store_true",
        help="also kvenv apply --no-compile and uv pip install --compile-bytecode",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tmp", type=Path)
    parser.add_argument(
        "--lock", type=Path, help="time only the locate phase of this existing portable lock"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/apply-index.json")
    args = parser.parse_args()
    kvenvs = {}
    for item in args.kvenv:
        label, _, path = item.partition("=")
        kvenvs[label] = Path(path).resolve()
    work = Path(tempfile.mkdtemp(prefix="kvenv-apply-index-", dir=args.tmp))
    profile = work / "proj" / "profiles" / "bench.toml"
    lock = work / "proj" / "locks" / "pylock.bench.toml"
    if args.lock is not None:  # the locate phase of that lock alone
        lock, args.uv = args.lock.resolve(), None
    else:
        bench_project(
            work / "proj",
            [args.require],
            python=platform.python_version(),
            machine=platform.machine(),
            glibc=platform.libc_ver()[1],
        )
        first = next(iter(kvenvs.values()))
        _timed([str(first), "lock", str(profile)], _env(KVENV_CACHE_DIR=str(work / "lock-cache")))
    doc = tomllib.loads(lock.read_text())
    overlay = [p for p in doc["packages"] if not p["tool"]["kvenv"].get("native")]
    assert doc["tool"]["kvenv"].get("portable")
    assert all("url" not in p["wheels"][0] for p in overlay)
    reqs = work / "reqs.txt"
    if args.lock is None:
        native = next((work / "proj" / "native").glob("*.whl"))
        reqs.write_text(
            "".join(
                f"{p['name']}=={p['version']} --hash=sha256:{p['wheels'][0]['hashes']['sha256']}\n"
                for p in overlay
            )
            + f"benchnative @ {native.as_uri()} --hash=sha256:{_sha256(native)}\n"
        )
    script = work / "locate.py"  # a file, not -c: the child must not import kvenv from the cwd
    script.write_text(LOCATE)
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> Path:
        return work / f"{kind}-{next(counter)}"

    samples: dict[str, list[tuple[float, float]]] = {}
    for number in range(args.rounds):
        jobs: list[tuple[str, list[str], dict[str, str]]] = []
        for label, kvenv in kvenvs.items():
            py = python_of(kvenv)
            jobs.append(
                (f"locate kvenv[{label}]", [py, str(script), str(lock), str(fresh("lc"))], _env())
            )
            if args.lock is None:
                env = _env(
                    KVENV_ROOT=str(fresh("root")), KVENV_CACHE_DIR=str(fresh("kc")), KVENV_PYTHON=py
                )
                jobs.append((f"apply kvenv[{label}]", [str(kvenv), "apply", str(profile)], env))
                if args.both_bytecode:
                    env = _env(
                        KVENV_ROOT=str(fresh("root")),
                        KVENV_CACHE_DIR=str(fresh("kc")),
                        KVENV_PYTHON=py,
                    )
                    argv = [str(kvenv), "apply", "--no-compile", str(profile)]
                    jobs.append((f"apply-nocompile kvenv[{label}]", argv, env))
        if args.pip:
            pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--target",
                   str(fresh("pipt")), "--cache-dir", str(fresh("pipc")), "--require-hashes",
                   "--quiet", "--disable-pip-version-check", "-r", str(reqs)]  # fmt: skip
            jobs.append(("apply pip", pip, _env()))
        if args.uv:
            uv = [args.uv, "pip", "install", "--no-deps", "--target", str(fresh("uvt")),
                  "--cache-dir", str(fresh("uvc")), "--python", sys.executable,
                  "--require-hashes", "--link-mode", "hardlink", "--quiet",
                  "-r", str(reqs)]  # fmt: skip
            jobs.append(("apply uv", uv, _env()))
            if args.both_bytecode:
                uvc = [*uv[:3], "--compile-bytecode", *uv[3:]]
                uvc[uvc.index("--target") + 1] = str(fresh("uvt"))
                uvc[uvc.index("--cache-dir") + 1] = str(fresh("uvc"))
                jobs.append(("apply-compile uv", uvc, _env()))
        if number % 2:
            jobs.reverse()
        for name, command, env in jobs:
            samples.setdefault(name, []).append(_timed(command, env))
        print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    results = {
        name: {
            "wall_s": round(statistics.median(v[0] for v in values), 3),
            "cpu_s": round(statistics.median(v[1] for v in values), 3),
            "walls": [round(v[0], 3) for v in values],
            "cpus": [round(v[1], 3) for v in values],
        }
        for name, values in samples.items()
    }
    ratios = {}
    pairs = [("apply", "apply", "uv"), ("apply", "apply", "pip")]
    pairs += [("apply", "apply-compile", "uv"), ("apply-nocompile", "apply", "uv")]
    for mine_kind, other_kind, other in pairs:
        row = results.get(f"{other_kind} {other}")
        for label in kvenvs:
            mine = results.get(f"{mine_kind} kvenv[{label}]")
            if row and mine:
                key = f"{mine_kind} kvenv[{label}]/{other_kind} {other}"
                ratios[f"{key} wall"] = round(mine["wall_s"] / row["wall_s"], 2)
                ratios[f"{key} cpu"] = round(mine["cpu_s"] / row["cpu_s"], 2)
    data = {
        "benchmark": "apply-index",
        "what": "cold kvenv apply of a portable lock from the default index vs uv pip install "
        "--target --no-deps of the same hashed pins; and the locate phase alone",
        "require": str(args.lock) if args.lock else args.require,
        "wheels": len(overlay),
        "wheel_bytes": sum(int(p["wheels"][0]["size"]) for p in overlay),
        "kvenv": {label: str(path) for label, path in kvenvs.items()},
        "uv": tool_version(args.uv),
        **run_facts(),
        "median_seconds": _groups(results, "wall_s"),
        "median_cpu_seconds": _groups(results, "cpu_s"),
        "samples": results,
        "ratios": ratios,
    }
    write_results(args.out, data)
    for name, row in results.items():
        print(f"{name:<22} wall {row['wall_s']:7.3f} s  cpu {row['cpu_s']:7.3f} s  {row['walls']}")
    for name, value in ratios.items():
        print(f"{name:<30} {value}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
