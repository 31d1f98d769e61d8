"""Output helpers for the CLI (the only printing code): text, JSON, errors (as text on stderr,
or with ``--json`` as one JSON object on stdout; see docs/errors.md) and progress."""

from __future__ import annotations

import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # typing is not imported at run time (start-up, issue 13)

if TYPE_CHECKING:
    from typing import Any

    from kvenv.errors import KvenvError, Problem


# -1 with --quiet, 1 with --verbose, else 0 (set per command by kvenv.cli.verbosity).
VERBOSITY = 0
NOTE = "note: "  # informational lines: dropped by --quiet


def out(text: str = "") -> None:
    if VERBOSITY < 0 and text.startswith(NOTE):
        return
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    if VERBOSITY < 0 and text.startswith(NOTE):
        return
    sys.stderr.write(text + "\n")


def detail(text: str) -> None:
    """A line only ``--verbose`` shows (on stderr): what kvenv resolved and where from."""
    if VERBOSITY > 0:
        sys.stderr.write(f"kvenv: {text}\n")


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


def report_error(
    kind: str,
    code: int,
    message: str,
    *,
    problems: Sequence[Problem] = (),
    hint: str | None = None,
    as_json: bool = False,
    usage: str | None = None,
    rendered: str | None = None,
) -> int:
    """Report one error and return its exit ``code``. As text: the usage (for a refused
    command line) and ``kvenv: error: ...`` on stderr. With ``as_json``: one object on stdout,
    ``{"error", "code", "message", "problems", "hint"}`` (and ``usage``), nothing on stderr."""
    if as_json:
        data: dict[str, Any] = {
            "error": kind,
            "code": code,
            "message": message,
            "problems": [_problem_json(p) for p in problems],
            "hint": hint,
        }
        if usage is not None:
            data["usage"] = usage.strip()
        emit_json(data)
        return code
    if usage is not None:
        sys.stderr.write(usage)
    if kind == "Interrupted":
        err(f"kvenv: {message}")
        return code
    if rendered is None:
        lines = [message, *(f"  - {p.render()}" for p in problems)]
        if hint:
            lines.append(f"hint: {hint}")
        rendered = "\n".join(lines)
    err(f"kvenv: error: {rendered}")
    return code


def _problem_json(problem: Problem) -> dict[str, str | None]:
    """A problem as JSON, its ``path`` always a ``$.``-path (an option's name, ``host``, is
    written ``$.host``)."""
    data = problem.to_json()
    path = data.get("path")
    if path and not path.startswith("$"):
        data["path"] = "$." + path
    return data


def report_kvenv_error(error: KvenvError, code: int, *, as_json: bool) -> int:
    """:func:`report_error` for a :class:`kvenv.errors.KvenvError`: its class names the kind."""
    return report_error(
        type(error).__name__,
        code,
        error.message,
        problems=error.problems,
        hint=error.hint,
        as_json=as_json,
        rendered=error.render(),
    )


def closest(given: str, choices: Sequence[str]) -> str | None:
    """The choice closest to a mistyped ``given`` (difflib), for a "did you mean" hint."""
    import difflib

    found = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.7)
    return found[0] if found else None


def counted(number: int, word: str, plural: str | None = None) -> str:
    """``number`` and ``word``, pluralised: ``1 package``, ``2 packages``, ``0 packages``."""
    return f"{number} {word if number == 1 else (plural or word + 's')}"


def progress_amount(done: float, total: float | None = None) -> str:
    """``done`` bytes (of ``total``) in the unit that suits the larger: ``512/2048 B``,
    ``0.3/1.2 MB``, ``12.0 kB``; never ``0.0/0.0 MB`` for small files."""
    largest = max(done, total or 0)
    scale, name = next(
        ((s, n) for s, n in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")) if largest >= s), (1, "B")
    )

    def shown(value: float) -> str:
        return f"{value:.0f}" if scale == 1 else f"{value / scale:.1f}"

    return f"{shown(done)}/{shown(total)} {name}" if total is not None else f"{shown(done)} {name}"


class TerminalProgress:
    """The one progress display (a :data:`kvenv._util.progress.Progress`): a status line on
    stderr, redrawn at most ten times a second, cleared by :meth:`close`. Inert unless
    ``enabled`` (callers enable it only on a terminal, never with ``--json``).

    The label says the phase: ``unpack <wheel>`` (bytes written of that wheel), ``link``
    (files linked into the generation), anything else a file being fetched (bytes). A new
    phase starts a new line: ``fetching 3/5 file(s): 12.0/80.0 MB, 9.1 MB/s``,
    ``unpacking 1/2 wheel(s): ...``, ``linking 12000/20000 file(s)``."""

    def __init__(self, verb: str, *, enabled: bool) -> None:
        import threading

        self.verb = verb
        self.enabled = enabled and VERBOSITY >= 0  # --quiet: no progress
        self._lock = threading.Lock()
        self._last = 0.0
        self._items: dict[str, tuple[int, int | None]] = {}
        self._phase = verb
        self._started = 0.0

    def __call__(self, label: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        import time

        phase, unit = self.verb, "file(s)"
        if label.startswith("unpack "):
            phase, unit, label = "unpacking", "wheel(s)", label[len("unpack ") :]
        elif label == "link":
            phase = "linking"
        with self._lock:
            now = time.monotonic()
            if phase != self._phase or not self._started:
                self._phase, self._started, self._items = phase, now, {}
            self._items[label] = (done, total)
            if now - self._last < 0.1:
                return
            self._last = now
            if phase == "linking":
                text = f"linking {done}/{total or '?'} file(s)"
            else:
                got = sum(d for d, _ in self._items.values())
                known = [t for _, t in self._items.values() if t is not None]
                finished = sum(1 for d, t in self._items.values() if t is not None and d >= t)
                rate = got / max(now - self._started, 1e-3)
                amount = (
                    progress_amount(got, sum(known))
                    if len(known) == len(self._items)
                    else f"{progress_amount(got)} (total not known yet)"
                )
                text = (
                    f"{phase} {finished}/{len(self._items)} {unit}: "
                    f"{amount}, {progress_amount(rate)}/s"
                )
            sys.stderr.write("\r" + text[:100].ljust(100))
            sys.stderr.flush()

    def close(self) -> None:
        with self._lock:
            if self.enabled and self._items:
                sys.stderr.write("\r" + " " * 100 + "\r")
                sys.stderr.flush()
