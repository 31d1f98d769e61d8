"""The server's supervisor: runs ``vllm serve``, reads its output through a pipe and writes it to
the log with every secret replaced by ``***``. kvenv never lets the server write a file itself.

``python -I logpipe.py LOG [--echo] [--tie PID GRACE] -- ARGV...``: the names of the
environment variables whose values are secret come in ``KVENV_REDACT`` (comma-separated
names, never values; removed from the server's environment). ``kvenv serve`` starts this
script in a new session, so the script leads the process group and the server runs inside
it: ``kill -TERM -- -PID`` reaches both. SIGTERM does not stop the script itself: it keeps
copying until the server exits, so the log holds the server's last words, then exits with
the server's code (128+N for signal N).

With ``--tie PID GRACE`` (``kvenv serve`` in the foreground) the server does not outlive the
kvenv process ``PID`` that started it, even when that one is killed with SIGKILL: the script
asks the kernel for a death signal (``prctl(PR_SET_PDEATHSIG, SIGUSR1)``, Linux) and, when it
comes (or ``PID`` is already gone when it is set), sends SIGTERM to its process group and
SIGKILL to the whole group ``GRACE`` seconds later (:func:`tie_to_parent`).

With ``--echo`` the redacted output is also copied to the script's stdout (kvenv's terminal in
the foreground). The script runs detached from the kvenv process that started it, under
``python -I`` (no PYTHONPATH, no user site): it puts the directory that holds this copy of
kvenv first on ``sys.path`` and imports nothing from kvenv but the redactor
(:mod:`kvenv._util.redact`, standard library only), whose masking it applies to every chunk.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

if __name__ == "__main__":  # a script: import the kvenv this file belongs to
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvenv._util.redact import mask_bytes

REDACT_ENV = "KVENV_REDACT"
READ_SIZE = 65536
POLL_SECONDS = 0.1


def held_back(data: bytes, secrets: Sequence[bytes]) -> int:
    """How many bytes at the end of ``data`` could begin a secret the next chunk completes."""
    longest = max((len(s) for s in secrets), default=0)
    for size in range(min(len(data), longest - 1), 0, -1):
        tail = data[-size:]
        if any(s.startswith(tail) for s in secrets):
            return size
    return 0


class Redactor:
    """Copies chunks to ``sinks`` with secrets masked, also across chunk boundaries."""

    def __init__(self, sinks: Sequence[IO[bytes]], secrets: Sequence[bytes]) -> None:
        self.sinks = list(sinks)
        self.secrets = [s for s in secrets if s]
        self._pending = b""

    def write(self, chunk: bytes) -> None:
        data = mask_bytes(self._pending + chunk, self.secrets)
        keep = held_back(data, self.secrets)
        self._pending = data[len(data) - keep :]
        self._emit(data[: len(data) - keep])

    def close(self) -> None:
        self._emit(mask_bytes(self._pending, self.secrets))
        self._pending = b""

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        for sink in list(self.sinks):
            try:
                sink.write(data)
                sink.flush()
            except OSError:  # a closed terminal: stop echoing, keep the log
                self.sinks.remove(sink)


def pump(fd: int, redactor: Redactor, child: subprocess.Popen[bytes]) -> int:
    """Copy the pipe until the server has exited and everything it wrote is copied (workers
    that outlive it may hold the pipe open: their later output is not waited for)."""
    exited = False
    while True:
        ready, _, _ = select.select([fd], [], [], 0 if exited else POLL_SECONDS)
        if ready:
            chunk = os.read(fd, READ_SIZE)
            if chunk:
                redactor.write(chunk)
                continue
            break
        if exited:
            break
        exited = child.poll() is not None  # then one more pass drains what it wrote last
    redactor.close()
    return child.wait()


PR_SET_PDEATHSIG = 1
DEATH_SIGNAL = signal.SIGUSR1


_stop_deadline: list[float] = []  # set once the group is being stopped


def stop_group(grace: float) -> None:
    """SIGTERM to this process's group (this script ignores it), SIGKILL to the whole group,
    this script included, ``grace`` seconds later (:func:`finish_stop` once the server is
    gone; a timer for a server that does not go)."""
    if _stop_deadline:
        return
    _stop_deadline.append(time.monotonic() + grace)
    signal.signal(signal.SIGALRM, lambda *_: os.killpg(0, signal.SIGKILL))
    signal.setitimer(signal.ITIMER_REAL, max(grace, 0.01))
    os.killpg(0, signal.SIGTERM)


def _others_in_group() -> bool:
    """Whether a running process (not a zombie) other than this one is in this group."""
    group, me = str(os.getpgrp()), str(os.getpid())
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    for name in entries:
        if not name.isdigit() or name == me:
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                line = handle.read()
        except OSError:
            continue
        fields = line[line.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == group and fields[0] not in ("Z", "X"):
            return True
    return False


def finish_stop() -> None:
    """After the server exited while the group is being stopped: wait for the rest of the
    group until the deadline, then SIGKILL what is left."""
    if not _stop_deadline:
        return
    while _others_in_group() and time.monotonic() < _stop_deadline[0]:
        time.sleep(0.05)
    signal.setitimer(signal.ITIMER_REAL, 0)
    if _others_in_group():
        os.killpg(0, signal.SIGKILL)


def tie_to_parent(parent: int, grace: float) -> bool:
    """Stop the group (:func:`stop_group`) when ``parent`` dies: the kernel's death signal is
    set for this process and checked against a parent that died before it was set. False where
    the kernel has no such signal (not Linux)."""
    signal.signal(DEATH_SIGNAL, lambda *_: stop_group(grace))
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it died before the signal was set
        os.kill(os.getpid(), DEATH_SIGNAL)
    return True


def main(args: Sequence[str]) -> int:
    if "--" not in args or args.index("--") < 1:
        sys.stderr.write("usage: logpipe.py LOG [--echo] [--tie PID GRACE] -- ARGV...\n")
        return 2
    split = args.index("--")
    log, echo, argv = args[0], "--echo" in args[1:split], list(args[split + 1 :])
    env = dict(os.environ)
    names = [n for n in env.pop(REDACT_ENV, "").split(",") if n]
    secrets = [env[n].encode() for n in names if env.get(n)]
    signal.signal(signal.SIGTERM, lambda *_: None)
    options = list(args[1:split])
    if "--tie" in options:
        at = options.index("--tie")
        tie_to_parent(int(options[at + 1]), float(options[at + 2]))
    with open(log, "ab") as handle:
        sinks: list[IO[bytes]] = [handle]
        if echo:
            sinks.append(sys.stdout.buffer)
        redactor = Redactor(sinks, secrets)
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            redactor.write(f"kvenv: cannot start {argv[0]}: {exc.strerror or exc}\n".encode())
            redactor.close()
            return 127
        assert child.stdout is not None
        code = pump(child.stdout.fileno(), redactor, child)
    finish_stop()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
