"""Where a cold ``kvenv apply`` from the index spends its time, phase by phase (issue 25).

    KVENV_PY benchmarks/apply_phases.py PROFILE [--rounds 3] [--jobs 8] [--no-compile]
        [--host-python PY] [--out PATH.json]

Run with the interpreter of the kvenv install to measure (the apply runs in this process,
``kvenv.cli.main``). PROFILE is a project's profile whose portable lock exists (e.g. the one
``benchmarks/apply_index.py`` makes for the jupyterlab closure). Each round applies into a new
root with an empty cache (the index environment variables cleared: the default index), with
kvenv's phases wrapped in timers: ``page`` (an index page fetched or revalidated), ``locate``
(a wheel's URL found on its page), ``download`` (a wheel streamed into the cache, hashed on
the way), ``unpack`` (a wheel into the store, every byte hashed against RECORD), ``bytecode``
(a store entry compiled, in a child interpreter) and the apply's later steps (``link``: the
overlay's hard links; ``manifest``, ``switch``). Per phase: how many calls, the sum of their
wall times (over all threads), the CPU of the calling threads, and the span from the first
start to the last end (seconds since the apply began). Wall and CPU (this process and its
children) of the whole apply are reported too. Medians over rounds.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import run_facts, write_results

REPO = Path(__file__).resolve().parent.parent

Event = tuple[str, float, float, float]  # phase, start, end, thread CPU


def _instrument(events: list[Event], start: list[float]) -> None:
    """Wrap kvenv's phase functions (any kvenv version that has them) with timers."""
    import kvenv.env.apply as apply_mod
    import kvenv.env.bytecode as bytecode_mod
    import kvenv.env.store as store_mod
    import kvenv.fetch.http as http_mod
    import kvenv.fetch.locate as locate_mod
    import kvenv.lock.pages as pages_mod

    lock = threading.Lock()

    def wrap(owner: Any, name: str, phase: str) -> None:
        original: Callable[..., Any] | None = getattr(owner, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                ended, used = time.perf_counter(), time.thread_time() - cpu
                with lock:
                    events.append((phase, began - start[0], ended - start[0], used))

        setattr(owner, name, timed)

    wrap(pages_mod.Pages, "get", "page")
    wrap(locate_mod.Locator, "locate", "locate")
    wrap(http_mod, "download", "download")
    # a wheel's unpack, in its thread or in the thread's worker process (the worker's CPU is
    # the children's, counted once the workers have exited)
    wrap(store_mod, "_unpack_in" if hasattr(store_mod, "_unpack_in") else "unpack", "unpack")
    wrap(bytecode_mod.Compiler, "_compile", "bytecode")
    wrap(apply_mod._Run, "install_overlay", "link")
    wrap(apply_mod._Run, "write_manifest", "manifest")
    wrap(apply_mod._Run, "switch", "switch")


def _round(
    profile: Path, work: Path, jobs: int, events: list[Event], start: list[float], flags: list[str]
) -> Any:
    from kvenv.cli import main

    os.environ["KVENV_ROOT"] = str(work / "root")
    os.environ["KVENV_CACHE_DIR"] = str(work / "cache")
    del events[:]
    self0, kids0 = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    start[0] = time.perf_counter()
    try:
        code = main(["apply", "--jobs", str(jobs), *flags, str(profile)])
    except SystemExit as done:
        code = done.code
    wall = time.perf_counter() - start[0]
    self1, kids1 = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    if code != 0:
        raise SystemExit(f"kvenv apply exited {code}")
    phases: dict[str, dict[str, float]] = {}
    for phase, began, ended, cpu in events:
        row = phases.setdefault(
            phase, {"calls": 0, "wall_sum": 0.0, "cpu_sum": 0.0, "first": began, "last": ended}
        )
        row["calls"] += 1
        row["wall_sum"] += ended - began
        row["cpu_sum"] += cpu
        row["first"], row["last"] = min(row["first"], began), max(row["last"], ended)
    return {
        "wall_s": wall,
        "cpu_self_s": self1.ru_utime - self0.ru_utime + self1.ru_stime - self0.ru_stime,
        "cpu_children_s": kids1.ru_utime - kids0.ru_utime + kids1.ru_stime - kids0.ru_stime,
        "phases": phases,
    }


def _median(rounds: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        key: round(statistics.median(r[key] for r in rounds), 3)
        for key in ("wall_s", "cpu_self_s", "cpu_children_s")
    }
    names = sorted({p for r in rounds for p in r["phases"]}, key=lambda p: _first(rounds, p))
    out["phases"] = {
        phase: {
            key: round(statistics.median(r["phases"][phase][key] for r in rounds), 3)
            for key in ("calls", "wall_sum", "cpu_sum", "first", "last")
        }
        for phase in names
        if all(phase in r["phases"] for r in rounds)
    }
    return out


def _first(rounds: list[Any], phase: str) -> float:
    return min(r["phases"][phase]["first"] for r in rounds if phase in r["phases"])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--no-compile", action="store_true", help="apply --no-compile")
    parser.add_argument("--tmp", type=Path)
    parser.add_argument("--host-python", type=Path, help="the host (default: this interpreter)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/apply-phases.json")
    args = parser.parse_args()
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_", "KVENV_")) or name == "VIRTUAL_ENV":
            del os.environ[name]
    os.environ["KVENV_PYTHON"] = str(args.host_python or sys.executable)
    events: list[Event] = []
    start = [0.0]
    _instrument(events, start)
    rounds = []
    for number in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="kvenv-apply-phases-", dir=args.tmp))
        try:
            flags = ["--no-compile"] if args.no_compile else []
            rounds.append(_round(args.profile.resolve(), work, args.jobs, events, start, flags))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"round {number + 1}/{args.rounds}: {rounds[-1]['wall_s']:.2f} s", file=sys.stderr)
    import kvenv

    data = {
        "benchmark": "apply-phases",
        "what": "a cold kvenv apply from the default index, in process, its phases timed",
        "kvenv": f"{kvenv.__version__} at {Path(kvenv.__file__).parent}",
        "jobs": args.jobs,
        **run_facts(),
        "median": _median(rounds),
        "rounds": rounds,
    }
    write_results(args.out, data)
    median = data["median"]
    print(
        f"wall {median['wall_s']:.2f} s  cpu {median['cpu_self_s']:.2f} s "
        f"+ children {median['cpu_children_s']:.2f} s"
    )
    for phase, row in median["phases"].items():
        print(
            f"{phase:<9} calls {row['calls']:>4.0f}  wall sum {row['wall_sum']:7.2f} s  "
            f"cpu {row['cpu_sum']:6.2f} s  span {row['first']:6.2f} - {row['last']:6.2f} s"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
