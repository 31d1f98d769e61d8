"""What several benchmarks share: the facts of the machine a run was taken on, writing a
results file, the interpreter behind a kvenv install, and the throwaway profile the lock
benchmarks resolve (a native wheel built here requiring the requirement set, an empty host).

Imported by the scripts beside it (``python benchmarks/NAME.py`` puts this folder on
``sys.path``); it puts the repository root there for ``tests.support``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def run_facts() -> dict[str, Any]:
    """Python, machine, load average and time of this run, as every results file records."""
    return {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average": os.getloadavg(),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def tool_version(exe: str | None) -> str | None:
    """What ``exe --version`` prints (stripped), or None without an executable."""
    if not exe:
        return None
    return subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()


def write_results(out: Path, data: Any) -> None:
    """``data`` as indented JSON at ``out`` (its folder made)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def medians(samples: dict[str, list[tuple[float, float]]], digits: int = 3) -> dict[str, Any]:
    """Per name: the median wall and CPU seconds of its ``(wall, cpu)`` rounds, and each round's."""
    import statistics

    return {
        name: {
            "wall_s": round(statistics.median(v[0] for v in values), digits),
            "cpu_s": round(statistics.median(v[1] for v in values), digits),
            "walls": [round(v[0], digits) for v in values],
            "cpus": [round(v[1], digits) for v in values],
        }
        for name, values in samples.items()
    }


def python_of(kvenv: Path) -> str:
    """The interpreter of a kvenv console script (its shebang), else this one."""
    first = kvenv.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    return first.removeprefix("#!").strip().split()[0] if first.startswith("#!") else sys.executable


def bench_project(
    root: Path,
    requires: list[str],
    *,
    python: str,
    machine: str,
    glibc: str,
    protected: list[str] | None = None,
    source: str | None = None,
) -> Path:
    """``root/profiles/bench.toml``: a profile whose native wheel (built here, a path source)
    requires ``requires``, for a CPython ``python``, linux ``machine``, glibc ``glibc`` target,
    over an empty host snapshot (recording ``source`` when given); ``protected`` replaces the
    default protected names when given."""
    from tests.support.wheels import build_wheel, sha256_of

    native = build_wheel(root / "native", "benchnative", "1.0", requires=requires)
    (root / "profiles").mkdir(parents=True)
    abi = "cp" + "".join(python.split(".")[:2])
    snapshot: dict[str, Any] = {
        "schema": 1,
        "python": {"version": python, "abi": abi},
        "platform": {"os": "linux", "machine": machine, "libc": "glibc", "libc_version": glibc},
        "distributions": [],
    }
    if source is not None:
        snapshot["source"] = source
    (root / "profiles" / "bench.host.json").write_text(json.dumps(snapshot))
    protect = "" if protected is None else f"protected = {json.dumps(protected)}\n"
    profile = root / "profiles" / "bench.toml"
    profile.write_text(
        f"""schema = 1
name = "bench"

[target]
python = "{python}"
abi = "{abi}"
os = "linux"
machine = "{machine}"
glibc = "{glibc}"

[host]
snapshot = "profiles/bench.host.json"
{protect}
[native]
name = "benchnative"
version = "1.0"
sha256 = "{sha256_of(native)}"

[native.source]
kind = "path"
path = "native/{native.name}"
"""
    )
    return profile


class ChildRun:
    """One child process measured on its own: wall seconds, CPU seconds (user + sys) and peak
    resident memory in MiB (the child and the descendants it waited for, so a kvenv that
    probes the host with a child Python counts that child's peak too)."""

    def __init__(self, wall: float, cpu: float, max_rss_mib: float, code: int, err: str):
        self.wall, self.cpu, self.max_rss_mib = wall, cpu, max_rss_mib
        self.returncode, self.stderr = code, err
        self.user = 0.0  # user CPU seconds alone (``cpu`` less this is the kernel's)


_TIME = "/usr/bin/time"


def run_child(command: list[str], env: dict[str, str], cwd: Path | None = None) -> ChildRun:
    """Run ``command`` and measure it alone. The peak RSS comes from GNU ``time`` when it is
    installed: a child forked by this (large) Python process carries this process's peak into
    its own ``ru_maxrss`` across ``exec``, so ``os.wait4`` alone reports at least that (about
    45 MiB here); ``time`` is a 2 MiB process. Wall and CPU come from ``os.wait4``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        peak_file = Path(tmp) / "rss"
        wrapped = command
        if os.access(_TIME, os.X_OK):
            wrapped = [_TIME, "-q", "-f", "%M", "-o", str(peak_file), *command]
        with open(Path(tmp) / "err", "w+b") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(
                wrapped, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err,
            )  # fmt: skip
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            err.seek(0)
            text = err.read().decode("utf-8", errors="replace")
        peak_kib = float(usage.ru_maxrss)
        if peak_file.is_file():
            lines = peak_file.read_text().split()
            peak_kib = float(lines[-1]) if lines and lines[-1].isdigit() else peak_kib
    cpu = usage.ru_utime + usage.ru_stime
    run = ChildRun(wall, cpu, peak_kib / 1024, proc.returncode, text)
    run.user = usage.ru_utime
    return run
