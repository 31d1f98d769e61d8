"""Output helpers for the CLI (the only printing code)."""

from __future__ import annotations

import sys
from typing import Any


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def emit_json(data: Any) -> None:
    """Print ``data`` as standard JSON: a NaN or infinity is an error, never a bare ``NaN``."""
    import json

    try:
        text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False)
    except ValueError as exc:
        from kvenv.errors import KvenvError

        raise KvenvError(
            f"cannot print JSON: a value is not a finite number ({exc})",
            hint="this is a bug in kvenv: please report it with the command you ran",
        ) from None
    sys.stdout.write(text + "\n")


class TerminalProgress:
    """The one progress display (a :data:`kvenv._util.progress.Progress`): a status line on
    stderr, redrawn at most ten times a second, cleared by :meth:`close`. Inert unless
    ``enabled`` (callers enable it only on a terminal, never with ``--json``)."""

    def __init__(self, verb: str, *, enabled: bool) -> None:
        import threading

        self.verb = verb
        self.enabled = enabled
        self._lock = threading.Lock()
        self._last = 0.0
        self._items: dict[str, tuple[int, int | None]] = {}

    def __call__(self, label: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        import time

        with self._lock:
            self._items[label] = (done, total)
            now = time.monotonic()
            if now - self._last < 0.1:
                return
            self._last = now
            got = sum(d for d, _ in self._items.values())
            known = sum(t or 0 for _, t in self._items.values())
            finished = sum(1 for d, t in self._items.values() if t is not None and d >= t)
            text = (
                f"{self.verb} {finished}/{len(self._items)} file(s): "
                f"{got / 1e6:.1f}/{known / 1e6:.1f} MB"
            )
            sys.stderr.write("\r" + text[:100].ljust(100))
            sys.stderr.flush()

    def close(self) -> None:
        with self._lock:
            if self.enabled and self._items:
                sys.stderr.write("\r" + " " * 100 + "\r")
                sys.stderr.flush()
