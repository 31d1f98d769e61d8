"""The loop of a worker process that unpacks wheels into the store for its parent
(:mod:`kvenv.env.unpackworker`, which starts it and reads its answers): one JSON job per line
of stdin, until its end; progress lines and one final line per job on stdout."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from kvenv.env.store import unpack
from kvenv.env.unpackworker import PROGRESS_EVERY, READY, error_to_data

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def run_worker(parent: int) -> None:
    """The worker's loop: one job per line of stdin until its end. ``parent`` is the pid of
    the process that started it; the worker dies with it, and leaves Ctrl-C to it."""
    import signal
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    out: IO[bytes] = sys.stdout.buffer
    out.write(READY)
    out.flush()

    def send(answer: dict[str, Any]) -> None:
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()

    last = [0.0]

    def report(label: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if done in (0, total) or now - last[0] >= PROGRESS_EVERY:
            last[0] = now
            send({"progress": [label, done, total]})

    for line in sys.stdin.buffer:
        job = json.loads(line)
        try:
            unpack(
                Path(job["store"]),
                job["sha256"],
                Path(job["wheel"]),
                protected=job["protected"],
                record_waivers=job["record_waivers"],
                jobs=job["jobs"],
                progress=report if job["progress"] else None,
            )
        except Exception as exc:  # sent to the parent, which raises it again
            send({"error": error_to_data(exc)})
        else:
            send({"ok": job["sha256"]})
