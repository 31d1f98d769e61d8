"""Helpers shared by the hardening tests (hostile inputs, fuzzing, secrets, faults, concurrency).

- :func:`run_cli` runs ``kvenv`` in this process and captures its exit code and output; any
  exception other than ``SystemExit`` escapes, so a traceback fails the calling test.
- :func:`tree_state` fingerprints a directory tree, to prove a refused command wrote nothing.
- :func:`kvenv_argv` / :func:`kvenv_env` start ``kvenv`` in a subprocess through a small driver
  that allows the loopback Hub server (the test-only seam ``allow_loopback_http``) and, when
  ``KVENV_FAULT_CALL`` is set, SIGKILLs itself at the N-th Python function call made inside
  kvenv, ``installer`` or ``huggingface_hub`` (``KVENV_FAULT_COUNT=FILE`` instead writes how many
  calls a whole run made, with the phase of each, so a harness can draw kill points from it).
  :data:`PHASES` names the phase letters.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
FAULT_CALL = "KVENV_FAULT_CALL"
FAULT_COUNT = "KVENV_FAULT_COUNT"

# The phase of a call is the area of the code it is in, one letter per call in a count file.
PHASES = {
    "d": "download",  # kvenv.fetch, huggingface_hub
    "v": "verify",  # re-hashing and checking: _util.hashing, env.seal, env.integrity, env.verify
    "i": "install",  # installer, env.wheelinstall, env.store, env.stage, env.pthreport
    "s": "state",  # manifest, generations, the pointer switch, shims: env.manifest, env.root,
    # env.activation, _util.atomic
    "o": "other",  # everything else (parsing, planning, the CLI)
}

# The driver: kvenv's CLI, loopback http allowed, and an optional seeded kill point.
DRIVER = r"""
import os, sys, signal, threading
from kvenv.cli import main
from kvenv._util.urls import allow_loopback_http

KILL_AT = int(os.environ.get("KVENV_FAULT_CALL") or 0)
COUNT_TO = os.environ.get("KVENV_FAULT_COUNT")
if KILL_AT or COUNT_TO:
    import huggingface_hub, installer, kvenv
    ROOTS = {
        os.path.dirname(m.__file__) + os.sep: m.__name__
        for m in (kvenv, installer, huggingface_hub)
    }
    S = os.sep
    AREAS = (
        ("d", ("kvenv" + S + "fetch" + S, "huggingface_hub")),
        ("v", ("hashing.py", S + "seal.py", "integrity.py", S + "verify.py")),
        ("i", ("wheelinstall.py", S + "store.py", S + "stage.py", "pthreport.py", "installer")),
        ("s", (S + "manifest.py", S + "root.py", "activation.py", "atomic.py")),
    )
    phases = []
    lock = threading.Lock()
    known = {}

    def phase(filename):
        found = known.get(filename)
        if found is None:
            found = next((p for p, parts in AREAS if any(x in filename for x in parts)), "o")
            known[filename] = found
        return found

    def hook(frame, event, arg):
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if not any(filename.startswith(root) for root in ROOTS):
            return
        with lock:
            phases.append(phase(filename))
            if len(phases) == KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.setprofile(hook)
    threading.setprofile(hook)

with allow_loopback_http():
    code = main(sys.argv[1:])
if COUNT_TO:
    sys.setprofile(None)
    threading.setprofile(None)
    with open(COUNT_TO, "w") as handle:
        handle.write("".join(phases))
sys.exit(code)
"""


@attrs.frozen
class CliResult:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_cli(args: Sequence[str]) -> CliResult:
    """``kvenv ARGS`` in this process: (exit code, stdout, stderr)."""
    from kvenv.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return CliResult(code, out.getvalue(), err.getvalue())


def tree_state(root: Path) -> dict[str, str]:
    """``relative path -> mode, size, mtime and content hash`` of everything under ``root``
    (directories: mode only, as a rolled-back write changes a directory's mtime)."""
    state: dict[str, str] = {}
    if not root.exists():
        return state
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = Path(current, name)
            info = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_dir() and not path.is_symlink():
                state[rel] = f"{info.st_mode:o} directory"  # mtime: entries made and removed
                continue
            digest = ""
            if path.is_file() and not path.is_symlink():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[rel] = f"{info.st_mode:o} {info.st_size} {info.st_mtime_ns} {digest}"
    return state


def kvenv_argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-c", DRIVER, *args]


def kvenv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a kvenv subprocess (no fault hooks unless in ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_CALL, FAULT_COUNT)}
    env.pop("KVENV_TEST_KILL_AT", None)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(extra or {})
    return env


FIGURES = REPO_ROOT / "benchmarks" / "results" / "reliability.json"


def record_figures(section: str, data: Mapping[str, object]) -> None:
    """Merge ``data`` as ``section`` into ``benchmarks/results/reliability.json`` (written by
    the ``slow`` harnesses; ``docs/reliability.md`` quotes it)."""
    import datetime
    import json
    import platform

    document: dict[str, object] = {}
    if FIGURES.is_file():
        document = json.loads(FIGURES.read_text())
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    document[section] = {**data, "measured_at": stamp, "python": platform.python_version()}
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)
