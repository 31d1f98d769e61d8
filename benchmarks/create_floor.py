"""What creating a closure's files costs the kernel alone on this machine: the floor under every
tool's cold install from disk (issue 25).

    python benchmarks/create_floor.py [--files 11988] [--dirs 1100] [--size 4096]
        [--rounds 5] [--tmp DIR] [--out PATH.json]

Each round makes ``--dirs`` directories and ``--files`` new files of ``--size`` bytes, one
directory filled after the other (``os.open`` with ``O_CREAT | O_EXCL``, one ``write``,
``close``: what kvenv's unpack and uv's cache fill both do per file, without any hashing or
decompression), under ``--tmp``, then removes them. The defaults are the jupyterlab closure's
11,988 files and about 1,100 directories. Reported: medians of wall, user and system CPU
seconds, and system CPU per file.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import run_facts, write_results

REPO = Path(__file__).resolve().parent.parent
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def _round(base: str, files: int, dirs: int, data: bytes) -> tuple[float, float, float]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    os.mkdir(base)
    for number in range(dirs):
        os.mkdir(f"{base}/{number}")
    per_dir = -(-files // dirs)
    for number in range(files):  # directory by directory, as an unpack goes
        fd = os.open(f"{base}/{number // per_dir}/f{number}", _CREATE, 0o444)
        os.write(fd, data)
        os.close(fd)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    shutil.rmtree(base)
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=11988)
    parser.add_argument("--dirs", type=int, default=1100)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tmp", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/create-floor.json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kvenv-create-floor-", dir=args.tmp)
    data = b"x" * args.size
    samples = [
        _round(f"{work}/{number}", args.files, args.dirs, data) for number in range(args.rounds)
    ]
    shutil.rmtree(work, ignore_errors=True)
    wall, user, system = (statistics.median(s[i] for s in samples) for i in range(3))
    data_out = {
        "benchmark": "create-floor",
        "what": "new files created, written once and closed, nothing else",
        "files": args.files,
        "dirs": args.dirs,
        "size": args.size,
        **run_facts(),
        "median_seconds": {"wall": round(wall, 4), "user": round(user, 4), "sys": round(system, 4)},
        "sys_ms_per_file": round(system * 1000 / args.files, 4),
        "walls": [round(s[0], 4) for s in samples],
        "sys": [round(s[2], 4) for s in samples],
    }
    write_results(args.out, data_out)
    print(
        f"{args.files} files in {args.dirs} dirs: wall {wall:.3f} s, user {user:.3f} s, "
        f"sys {system:.3f} s ({system * 1000 / args.files:.3f} ms of sys per file)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
