"""Unpacking wheels into the store in worker processes, one per unpacking thread.

A wheel's unpack is short system calls and C calls (``pread``, inflate, sha256, ``open``,
``write``) with Python between them for every member; threads of one process take turns at
that Python and gain nothing from a second CPU (measured: 91 wheels, 2 threads, the same wall
as 1 and 40% more CPU). So on Linux each unpacking thread hands its larger wheels to a worker
process of its own (started on its first such wheel, kept until the pool closes) and waits for
it, and the wheels unpack side by side on every CPU while the parent's threads download.

The worker (its loop: :mod:`kvenv.env.unpackmain`) runs :func:`kvenv.env.store.unpack`
itself, so a store entry is made exactly as in process: in a temporary directory, sealed,
renamed into place complete. What changes is who may
die: a worker asks the kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), and checks
that its parent is still the one that started it, so a killed apply leaves what a killed apply
with threads leaves (at most a temporary directory, never a half entry). A worker that dies on
its own (the out-of-memory killer) fails its wheel with :class:`~kvenv.errors.InstallError`; the
apply fails as with any other unpack error, its previous state intact. Ctrl-C is the parent's to
handle: workers ignore it and finish the wheel they hold, as threads would.

Protocol: one JSON line per job on the worker's stdin; the worker answers with progress lines
and one final line (``{"ok": ...}`` or ``{"error": ...}``) on its stdout. Errors travel as
data (class, message, problems, hint, or an ``OSError``'s errno) and are raised again here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from kvenv._util.progress import Progress
from kvenv.errors import InstallError, KvenvError, Problem

# A wheel smaller than this is unpacked in the calling thread: it is over before a worker
# could start (about 0.1 s to import the unpacker), and a closure of small wheels starts none.
WORKER_MIN_BYTES = 256 << 10
_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from kvenv.env.unpackmain import run_worker; run_worker(int(sys.argv[2]))"
)
READY = b'{"ready": true}\n'  # a worker's first line, once it has imported the unpacker
PROGRESS_EVERY = 0.05  # seconds between a worker's progress lines (a line per file otherwise)


def available() -> bool:
    """Whether worker processes can be used: Linux (the parent-death signal) and a known
    interpreter."""
    return sys.platform.startswith("linux") and bool(sys.executable)


class Workers:
    """Worker processes, one per calling thread, each started on that thread's first job and
    stopped by :meth:`close` (after the threads are done with them). A worker that cannot
    start (no interpreter to run, kvenv not importable the parent's way) stops any more from
    starting this run, and the threads unpack in process as before."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[subprocess.Popen[bytes]] = []
        self._closed = False
        self._broken = False
        self._errors: dict[int, IO[bytes]] = {}

    def _worker(self) -> subprocess.Popen[bytes] | None:
        """This thread's worker, started (and its start awaited) on first use; None when
        none can start here (then the caller unpacks in its thread)."""
        proc: subprocess.Popen[bytes] | None = getattr(self._local, "proc", None)
        if proc is not None and proc.poll() is None:
            return proc
        paths = [str(Path(__file__).resolve().parents[2]), *sys.path]  # kvenv's, first
        with self._lock:
            if self._closed or self._broken:
                return None
            # Its stderr, read only if it dies: a file, since a pipe nobody reads could fill.
            errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _BOOT, json.dumps(paths), str(os.getpid())],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    close_fds=True,
                )
            except OSError:
                errors.close()
                self._broken = True
                return None
            self._all.append(proc)
            self._errors[proc.pid] = errors
        assert proc.stdout is not None
        if proc.stdout.readline() != READY:  # it could not import kvenv: never again this run
            self._broken = True
            proc.kill()
            return None
        self._local.proc = proc
        return proc

    def unpack(
        self,
        store: Path,
        sha256: str,
        wheel: Path,
        *,
        protected: Iterable[str],
        record_waivers: Iterable[str],
        jobs: int,
        progress: Progress | None,
    ) -> bool:
        """Unpack ``wheel`` into ``store`` in this thread's worker (see
        :func:`kvenv.env.store.unpack`): True once the entry is complete in the store; False
        when no worker could start (nothing was done)."""
        proc = self._worker()
        if proc is None:
            return False
        assert proc.stdin is not None and proc.stdout is not None
        job = {
            "store": str(store),
            "sha256": sha256,
            "wheel": str(wheel),
            "protected": list(protected),
            "record_waivers": list(record_waivers),
            "jobs": jobs,
            "progress": progress is not None,
        }
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            raise self._died(proc, wheel) from None
        while True:
            line = proc.stdout.readline()
            if not line:
                raise self._died(proc, wheel)
            answer = json.loads(line)
            if "progress" in answer:
                if progress is not None:
                    label, done, total = answer["progress"]
                    progress(label, done, total)
                continue
            if "error" in answer:
                raise error_from_data(answer["error"], wheel)
            return True

    def _died(self, proc: subprocess.Popen[bytes], wheel: Path) -> InstallError:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors = self._errors[proc.pid]
        errors.seek(0)
        stderr = errors.read().decode(errors="replace").strip()
        last = stderr.splitlines()[-1] if stderr else f"exit status {proc.returncode}"
        return InstallError(
            f"the process unpacking {wheel.name} stopped before it finished ({last})",
            hint="nothing was installed; if the machine is short of memory, run `{kvenv apply}` "
            "again with fewer jobs (--jobs 1)",
        )

    def close(self) -> None:
        """Stop every worker: each finishes the wheel it holds (none do once the unpacking
        threads have returned) and exits at the end of its input."""
        with self._lock:
            self._closed = True
            procs, self._all = self._all, []
            errors, self._errors = self._errors, {}
        for proc in procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for file in errors.values():
            file.close()


def error_to_data(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, KvenvError):
        problems, hint = exc._templates
        return {
            "kind": "kvenv",
            "class": type(exc).__name__,
            "message": exc.message,
            "problems": [p.to_json() for p in problems],
            "hint": hint,
        }
    if isinstance(exc, OSError) and exc.errno is not None:
        return {"kind": "os", "errno": exc.errno, "strerror": exc.strerror, "file": exc.filename}
    return {"kind": "other", "text": f"{type(exc).__name__}: {exc}"}


def error_from_data(data: dict[str, Any], wheel: Path) -> BaseException:
    from kvenv import errors

    if data["kind"] == "kvenv":
        cls = getattr(errors, data["class"], None)
        if not (isinstance(cls, type) and issubclass(cls, KvenvError)):
            cls = InstallError
        problems = [
            Problem(p["message"], file=p["file"], path=p["path"], fix=p["fix"])
            for p in data["problems"]
        ]
        return cls(data["message"], problems=problems, hint=data["hint"])
    if data["kind"] == "os":
        return OSError(data["errno"], data["strerror"], data["file"])
    return InstallError(f"unpacking {wheel.name} failed: {data['text']}")
