"""The server's supervisor: runs ``vllm serve``, reads its output through a pipe and writes it to
the log with every secret replaced by ``***``. kvenv never lets the server write a file itself.

``python -I logpipe.py LOG [--echo] -- ARGV...``: the names of the environment variables whose
values are secret come in ``KVENV_REDACT`` (comma-separated names, never values; removed from
the server's environment). ``kvenv serve`` starts this script in a new session, so the script
leads the process group and the server runs inside it: ``kill -TERM -- -PID`` reaches both.
SIGTERM does not stop the script itself: it keeps copying until the server exits, so the log
holds the server's last words, then exits with the server's code (128+N for signal N).
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


def main(args: Sequence[str]) -> int:
    if "--" not in args or args.index("--") < 1:
        sys.stderr.write("usage: logpipe.py LOG [--echo] -- ARGV...\n")
        return 2
    split = args.index("--")
    log, echo, argv = args[0], "--echo" in args[1:split], list(args[split + 1 :])
    env = dict(os.environ)
    names = [n for n in env.pop(REDACT_ENV, "").split(",") if n]
    secrets = [env[n].encode() for n in names if env.get(n)]
    signal.signal(signal.SIGTERM, lambda *_: None)
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
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
