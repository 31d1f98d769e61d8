"""A cold ``kvenv apply`` from the index with a portable lock (every wheel located on the
index by file name and sha256, then downloaded) against ``uv pip install --target --no-deps``
of the same hashed pins from the same index, and the locate phase alone, in one run, rounds
alternating (issue 25). Several kvenv installs (e.g. the commit before a change and after it)
are timed side by side: ``--kvenv LABEL=PATH`` once per install.

    python benchmarks/apply_index.py --kvenv after=.venv/bin/kvenv [--kvenv before=...]
        [--require jupyterlab | --lock PYLOCK] [--uv UV] [--pip] [--rounds 3] [--out PATH.json]
        [--no-compile | --both-bytecode] [--tmp DIR] [--host-python PY] [--waive-record NAME]
        [--allow-pth NAME] [--warm-rounds N] [--import MODULE [--import-rounds N]]

``--lock`` times the locate phase alone on an existing portable lock (e.g. a vLLM closure's).
``--waive-record NAME`` waives that distribution's RECORD in the profile (vLLM's closure has
``pynvvideocodec``, whose RECORD lists wrong hashes). ``--host-python PY`` makes that
interpreter the host (e.g. a venv with the index's torch, as a vLLM closure needs): its snapshot
is taken with ``kvenv fingerprint --python PY --save`` before the lock, so the overlay is what
that host lacks (the torch family protected), and every tool installs for it
(``$KVENV_PYTHON``, ``uv --python``). ``--allow-pth NAME`` allows that distribution's
executable ``.pth`` (vLLM's closure: ``nvidia-cutlass-dsl``), as the real overlay's profile
does. After the cold rounds, ``--warm-rounds N`` times a warm apply into a new root (each tool's
cache filled once, untimed), and ``--import MODULE`` times ``import MODULE`` from a generation
with bytecode and one without (the host interpreter, ``PYTHONDONTWRITEBYTECODE=1``).

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
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib
from _common import (
    bench_project,
    medians,
    python_of,
    run_child,
    run_facts,
    tool_version,
    write_results,
)

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


def _groups(
    results: dict[str, dict[str, Any]], key: str, no_compile: bool = False
) -> dict[str, dict[str, float]]:
    """``{"locate": {"kvenv[after]": 1.1, ...}, "apply cold": {...}}``: the apply benchmarks'
    shape (``benchmarks/make_charts.py``); with ``no_compile`` no tool wrote bytecode, so uv's
    and pip's applies go with kvenv's ``--no-compile`` ones."""
    out: dict[str, dict[str, float]] = {}
    for name, row in results.items():
        phase, _, tool = name.partition(" ")
        if no_compile and phase == "apply":
            phase = "apply-nocompile"
        group = {"locate": "locate", "apply-nocompile": "apply cold, no bytecode"}.get(phase)
        group = group or {"import": "import, PYTHONDONTWRITEBYTECODE=1"}.get(phase)
        group = group or {"warm": "apply warm, new root"}.get(phase)
        group = group or {"apply-compile": "apply cold, bytecode"}.get(phase, "apply cold")
        out.setdefault(group, {})[tool] = row[key]
    return out


def _warm(
    args: argparse.Namespace, work: Path, profile: Path, reqs: Path, kvenvs: dict[str, Path]
) -> dict[str, dict[str, Any]]:
    """A warm apply into a new root: each kvenv's cache and store filled by one apply, uv's
    cache by one install (neither timed), then ``--warm-rounds`` rounds into new roots and
    targets, alternating; medians. kvenv without bytecode when ``--no-compile``."""
    flags = ["--no-compile"] if args.no_compile else []
    jobs: list[tuple[str, Callable[[Path], tuple[list[str], dict[str, str]]]]] = []
    for label, kvenv in kvenvs.items():
        host = str(args.host_python or python_of(kvenv))
        cache = work / f"warm-cache-{label}"

        def make(root: Path, kvenv: Path = kvenv, host: str = host, cache: Path = cache) -> Any:
            env = _env(KVENV_ROOT=str(root), KVENV_CACHE_DIR=str(cache), KVENV_PYTHON=host)
            return [str(kvenv), "apply", *flags, str(profile)], env

        jobs.append((f"warm kvenv[{label}]", make))
    if args.uv:

        def make_uv(target: Path) -> Any:
            python = str(args.host_python or sys.executable)
            return [args.uv, "pip", "install", "--no-deps", "--target", str(target),
                    "--cache-dir", str(work / "warm-cache-uv"), "--python", python,
                    "--require-hashes", "--link-mode", "hardlink", "--quiet",
                    "-r", str(reqs)], _env()  # fmt: skip

        jobs.append(("warm uv", make_uv))
    for _, make in jobs:  # fill the caches
        _timed(*make(work / "warm-fill"))
        shutil.rmtree(work / "warm-fill", ignore_errors=True)
    samples: dict[str, list[tuple[float, float]]] = {}
    for number in range(args.warm_rounds):
        for name, make in jobs if number % 2 == 0 else jobs[::-1]:
            samples.setdefault(name, []).append(_timed(*make(work / "warm-root")))
            shutil.rmtree(work / "warm-root", ignore_errors=True)
    return medians(samples)


def _imports(
    args: argparse.Namespace, work: Path, profile: Path, kvenv: Path
) -> dict[str, dict[str, Any]]:
    """``import MODULE`` by the host interpreter from a generation with bytecode and from one
    without (the kvenv default and ``--no-compile``), ``PYTHONDONTWRITEBYTECODE=1`` as on this
    machine and on read-only generations, alternating; medians."""
    from bytecode import _layers

    host = str(args.host_python or python_of(kvenv))
    paths = {}
    for label, flags in (("bytecode", []), ("no bytecode", ["--no-compile"])):
        root = work / f"import-root-{len(paths)}"
        env = _env(KVENV_ROOT=str(root), KVENV_CACHE_DIR=str(work / "import-cache"))
        _timed([str(kvenv), "apply", *flags, str(profile)], dict(env, KVENV_PYTHON=host))
        paths[label] = _layers(root)
    samples: dict[str, list[tuple[float, float]]] = {}
    for number in range(args.import_rounds):
        order = list(paths.items())
        if number % 2:
            order.reverse()
        for label, pythonpath in order:
            env = _env(PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")
            samples.setdefault(label, []).append(_timed([host, "-c", f"import {args.module}"], env))
    return medians({f"import {args.module}[{k}]": v for k, v in samples.items()})


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
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="no tool writes bytecode: kvenv apply --no-compile only, pip --no-compile",
    )
    parser.add_argument(
        "--waive-record",
        action="append",
        default=[],
        metavar="NAME",
        help="a distribution published with a wrong RECORD (the profile's record_waivers)",
    )
    parser.add_argument(
        "--allow-pth",
        action="append",
        default=[],
        metavar="NAME",
        help="a distribution whose executable .pth the profile allows",
    )
    parser.add_argument(
        "--import",
        dest="module",
        help="then time `import MODULE` (the host, PYTHONDONTWRITEBYTECODE=1) from a generation "
        "of the last kvenv with bytecode and one without",
    )
    parser.add_argument("--import-rounds", type=int, default=7)
    parser.add_argument(
        "--warm-rounds", type=int, default=0, help="then time warm applies into new roots"
    )
    parser.add_argument("--host-python", type=Path, help="the host interpreter (default: none)")
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
        with profile.open("a") as text:  # as the real vLLM overlay's profile does
            for table, names in (
                ("record_waivers", args.waive_record),
                ("allow_pth", args.allow_pth),
            ):
                for name in names:
                    text.write(f'\n[[overlay.{table}]]\nname = "{name}"\nreason = "benchmark"\n')
        first = next(iter(kvenvs.values()))
        cache = _env(KVENV_CACHE_DIR=str(work / "lock-cache"))
        if args.host_python is not None:
            snapshot = work / "proj" / "profiles" / "bench.host.json"
            argv = ["fingerprint", "--python", str(args.host_python), "--save", str(snapshot)]
            _timed([str(first), *argv], cache)
        _timed([str(first), "lock", str(profile)], cache)
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
                host = str(args.host_python or py)
                env = _env(
                    KVENV_ROOT=str(fresh("root")),
                    KVENV_CACHE_DIR=str(fresh("kc")),
                    KVENV_PYTHON=host,
                )
                if not args.no_compile:
                    argv = [str(kvenv), "apply", str(profile)]
                    jobs.append((f"apply kvenv[{label}]", argv, env))
                if args.both_bytecode or args.no_compile:
                    env = _env(
                        KVENV_ROOT=str(fresh("root")),
                        KVENV_CACHE_DIR=str(fresh("kc")),
                        KVENV_PYTHON=host,
                    )
                    argv = [str(kvenv), "apply", "--no-compile", str(profile)]
                    jobs.append((f"apply-nocompile kvenv[{label}]", argv, env))
        if args.pip:
            pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--target",
                   str(fresh("pipt")), "--cache-dir", str(fresh("pipc")), "--require-hashes",
                   "--quiet", "--disable-pip-version-check", "-r", str(reqs)]  # fmt: skip
            if args.no_compile:
                pip.insert(pip.index("--quiet"), "--no-compile")
            jobs.append(("apply pip", pip, _env()))
        if args.uv:
            target_python = str(args.host_python or sys.executable)
            uv = [args.uv, "pip", "install", "--no-deps", "--target", str(fresh("uvt")),
                  "--cache-dir", str(fresh("uvc")), "--python", target_python,
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
            for made in work.iterdir():  # what the job made (a vLLM closure's root is GBs)
                if made.is_dir() and made.name.rpartition("-")[2].isdigit():
                    shutil.rmtree(made, ignore_errors=True)
        print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    results = medians(samples)
    if args.warm_rounds:
        results.update(_warm(args, work, profile, reqs, kvenvs))
    if args.module:
        try:
            results.update(_imports(args, work, profile, list(kvenvs.values())[-1]))
        except SystemExit as failed:  # the apply rows are kept all the same
            print(f"import rounds failed: {failed}", file=sys.stderr)
    ratios = {}
    pairs = [("apply", "apply", "uv"), ("apply", "apply", "pip")]
    pairs += [("apply", "apply-compile", "uv"), ("apply-nocompile", "apply", "uv")]
    pairs += [("apply-nocompile", "apply", "pip")]
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
        "host_python": str(args.host_python) if args.host_python else None,
        "no_compile": args.no_compile,
        "wheels": len(overlay),
        "wheel_bytes": sum(int(p["wheels"][0]["size"]) for p in overlay),
        "kvenv": {label: str(path) for label, path in kvenvs.items()},
        "uv": tool_version(args.uv),
        **run_facts(),
        "median_seconds": _groups(results, "wall_s", args.no_compile),
        "median_cpu_seconds": _groups(results, "cpu_s", args.no_compile),
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
