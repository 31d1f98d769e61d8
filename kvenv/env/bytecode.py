"""Bytecode that travels with the store: each unpacked wheel compiled once per interpreter.

Generations are hard links into read-only store entries, and this machine (like many CI
runners) sets ``PYTHONDONTWRITEBYTECODE``: without bytecode in the store every process would
compile every module it imports from source. So, as ``pip`` and ``uv pip install
--compile-bytecode`` do, the *host* interpreter (never kvenv's own) compiles each store entry's
``.py`` files in a subprocess, once, and the result is a store entry of its own:

- keyed by the wheel's sha256 *and* the interpreter's cache tag (``cpython-311``):
  ``<store>/<sha256("kvenv-bytecode", wheel sha256, tag)>/``, so a wheel entry unpacked for one
  interpreter and reused by another gets that interpreter's bytecode, never the other's (and
  the wheel's entry itself is never changed after it was sealed);
- laid out like the wheel's ``site``: ``site/<pkg>/__pycache__/<mod>.<tag>.pyc``, beside a
  ``site/<dist-info>/RECORD`` that is the wheel's RECORD with a row (sha256, size) for each
  ``.pyc`` appended, as pip writes it; a generation links this RECORD instead of the wheel's,
  so ``kvenv verify`` hashes the bytecode like every other installed file, and the manifest's
  RECORD digest covers it;
- sealed like every store entry (:mod:`kvenv.env.seal`), checked before reuse, and removed and
  compiled again when its seal is broken (bytecode is derived: nothing is lost);
- unchecked-hash ``.pyc`` files (PEP 552): the interpreter never stats or re-reads the source
  to decide whether the bytecode is current. Timestamp ``.pyc`` would work with hard links
  (they share the source's mtime) but go stale, silently and for every later import, after the
  harmless ``touch`` the seal accepts; checked-hash ones re-read and hash every source at every
  import. The store's sources never change in place (the seal is what guarantees that), which
  is the one condition unchecked-hash bytecode needs.

A ``.py`` file that does not compile (a wheel shipping Python 2 test data) simply has no
bytecode, as with pip. An interpreter without a cache tag gets none either.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import attrs

from kvenv.env.seal import publish_sealed, remove_sealed, seal, seal_problem
from kvenv.env.store import MARKER, StoreEntry
from kvenv.errors import InstallError

BYTECODE_FORMAT = 1
BYTECODE_KIND = "bytecode"

# Run by the host interpreter (``-S -s``: no site, no user site), standard library only, for
# as long as kvenv feeds it: prints its cache tag, then reads one job per line (``[source root,
# target root, [relative .py paths]]``), writes each file's unchecked-hash .pyc under the
# target root at the path ``cache_from_source`` gives under the source root (the code's file
# name is the relative path, so identical sources in two wheels compile to identical bytes;
# the import system sets the real path when it loads them) and answers one line per job:
# ``[[rel, pyc rel, sha256 b64, size], ...]``.
_SCRIPT = r"""
import base64, hashlib, importlib.util, json, marshal, os, sys, warnings
warnings.simplefilter("ignore")  # a SyntaxWarning per odd escape: not kvenv's to report
tag = sys.implementation.cache_tag
head = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little")  # PEP 552: hash, unchecked
print(json.dumps({"tag": tag}), flush=True)
made = set()
for line in sys.stdin:
    source_root, target_root, paths = json.loads(line)
    rows = []
    for rel in paths if tag else ():
        source = source_root + "/" + rel
        pyc = importlib.util.cache_from_source(source)[len(source_root) + 1:]
        try:
            with open(source, "rb") as stream:
                data = stream.read()
            code = compile(data, rel, "exec", dont_inherit=True)
        except Exception:
            continue
        out = head + importlib.util.source_hash(data) + marshal.dumps(code)
        target = target_root + "/" + pyc
        directory = os.path.dirname(target)
        if directory not in made:
            os.makedirs(directory, exist_ok=True)
            made.add(directory)
        with open(target, "xb") as stream:
            stream.write(out)
        digest = base64.urlsafe_b64encode(hashlib.sha256(out).digest()).decode().rstrip("=")
        rows.append([rel, pyc, digest, len(out)])
    print(json.dumps(rows), flush=True)
"""

_TAG_SCRIPT = "import sys; print(sys.implementation.cache_tag)"


@attrs.frozen
class Bytecode:
    """A complete bytecode entry: ``pyc`` maps each compiled source (RECORD path under the
    wheel's ``site``) to its ``.pyc`` (under this entry's ``site``); ``record`` is the RECORD a
    generation links (the wheel's, with the ``.pyc`` rows)."""

    key: str
    path: Path
    wheel: str
    tag: str
    record: str
    pyc: dict[str, str]

    def as_entry(self, wheel: StoreEntry) -> StoreEntry:
        """This entry as a source of files for linking (its files lie under ``site`` too)."""
        return StoreEntry(self.key, self.path, wheel.dist)


def bytecode_key(wheel_sha256: str, tag: str) -> str:
    """The store entry name of ``wheel_sha256``'s bytecode for the cache tag ``tag``."""
    return hashlib.sha256(f"kvenv-bytecode\0{wheel_sha256}\0{tag}".encode()).hexdigest()


_TAGS: dict[str, str | None] = {}


def cache_tag(python: str, known: tuple[str, str, str | None] | None = None) -> str | None:
    """The cache tag of the interpreter ``python``: from ``known`` (``(implementation, version,
    executable)`` of a probed host) when it is that CPython, else asked of it once."""
    if known is not None:
        implementation, version, executable = known
        parts = version.split(".")
        if implementation == "cpython" and executable == python and len(parts) >= 2:
            return f"cpython-{parts[0]}{parts[1]}"
    if python not in _TAGS:
        try:
            done = subprocess.run(
                [python, "-S", "-s", "-c", _TAG_SCRIPT],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
                env=_child_env(),
            )
            tag = done.stdout.strip()
            _TAGS[python] = tag if tag and tag != "None" and "/" not in tag else None
        except (OSError, subprocess.SubprocessError):
            _TAGS[python] = None
    return _TAGS[python]


def _child_env() -> dict[str, str]:
    """The environment of the compiling interpreter: ours, without a ``PYTHONPATH`` that could
    shadow its standard library, with a fixed hash seed (the same bytes every time)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONHASHSEED"] = "0"
    return env


def sources(entry: StoreEntry) -> list[str]:
    """The ``.py`` files of a wheel entry that get bytecode: those in its ``site``."""
    return [p for p in entry.dist.files if p.endswith(".py") and not p.startswith("../")]


def lookup_bytecode(store: Path, wheel_sha256: str, tag: str) -> Bytecode | None:
    """The complete bytecode entry of ``wheel_sha256`` for ``tag``, or None."""
    key = bytecode_key(wheel_sha256, tag)
    path = store / key
    try:
        data = json.loads((path / MARKER).read_bytes())
        if (
            data["format"] != BYTECODE_FORMAT
            or data["kind"] != BYTECODE_KIND
            or data["wheel"] != wheel_sha256
            or data["tag"] != tag
        ):
            return None
        record, pyc = data["record"], data["pyc"]
        if not (isinstance(record, str) and isinstance(pyc, dict)):
            return None
        return Bytecode(
            key, path, wheel_sha256, tag, record, {str(k): str(v) for k, v in pyc.items()}
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def compile_entries(
    store: Path,
    entries: Mapping[str, StoreEntry],
    *,
    python: str,
    tag: str,
    jobs: int = 2,
    full_check: bool = False,
    on_damaged: Callable[[str], None] | None = None,
) -> dict[str, Bytecode]:
    """The bytecode entry for ``tag`` of every wheel entry with ``.py`` files (by wheel
    sha256): reused while its seal holds (with ``full_check``: always compiled again), else
    compiled by ``python`` in up to ``jobs`` worker processes and sealed into the store."""
    with Compiler(store, python=python, tag=tag, jobs=jobs, full_check=full_check) as compiler:
        compiler.on_damaged = on_damaged
        for entry in entries.values():
            compiler.submit(entry)
        return compiler.results(entries)


class Compiler:
    """Store entries compiled as they are handed over (:meth:`submit`, from any thread) by up
    to ``jobs`` long-lived processes of the host interpreter (started on first use: one start
    per process, not per wheel), largest waiting entry first; :meth:`results` waits for them.
    A failure (the interpreter cannot run, reports another tag, dies) is raised by
    :meth:`results` as an :class:`InstallError`."""

    def __init__(
        self, store: Path, *, python: str, tag: str, jobs: int, full_check: bool = False
    ) -> None:
        import threading

        self.store, self.python, self.tag = store, python, tag
        self.jobs = max(1, min(jobs, os.cpu_count() or 1))
        self.full_check = full_check
        self.on_damaged: Callable[[str], None] | None = None
        self._lock = threading.Condition()
        self._waiting: list[StoreEntry] = []
        self._busy = 0
        self._closed = False
        self._done: dict[str, Bytecode] = {}
        self._failed: list[InstallError] = []
        self._workers: list[threading.Thread] = []
        self._processes: list[subprocess.Popen[str]] = []
        self._seen: set[str] = set()
        self._errors: dict[int, IO[bytes]] = {}

    def __enter__(self) -> Compiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, entry: StoreEntry) -> None:
        """Compile ``entry`` (unless it has no ``.py`` files, or its bytecode is in the store
        and sealed: then that is its result)."""
        import threading

        with self._lock:
            if entry.sha256 in self._seen or not sources(entry):
                return
            self._seen.add(entry.sha256)
        found = self._reusable(entry)
        with self._lock:
            if found is not None:
                self._done[entry.sha256] = found
                return
            self._waiting.append(entry)
            self._waiting.sort(key=lambda e: len(sources(e)))  # the largest is taken first
            idle = len(self._workers) - self._busy
            if len(self._workers) < self.jobs and len(self._waiting) > idle:
                worker = threading.Thread(target=self._work, name="kvenv-compile", daemon=True)
                self._workers.append(worker)
                worker.start()
            self._lock.notify()

    def _reusable(self, entry: StoreEntry) -> Bytecode | None:
        found = lookup_bytecode(self.store, entry.sha256, self.tag)
        if found is None:
            return None
        broken = seal_problem(found.path)
        if broken is None and not self.full_check:
            return found
        if broken is not None and self.on_damaged is not None:
            self.on_damaged(
                f"bytecode of {entry.dist.name} {entry.dist.version} ({self.tag}) was changed "
                f"after sealing ({broken.message}); compiled again"
            )
        remove_sealed(found.path)  # derived bytes: compiled again rather than checked
        return None

    def results(self, entries: Mapping[str, StoreEntry]) -> dict[str, Bytecode]:
        """The bytecode of each of ``entries`` that has any (submitted now if it was not),
        once every submitted entry is compiled."""
        for entry in entries.values():
            self.submit(entry)
        with self._lock:
            while (self._waiting or self._busy) and not self._failed:
                self._lock.wait()
            if self._failed:
                raise self._failed[0]
            return {sha: self._done[sha] for sha in entries if sha in self._done}

    def close(self) -> None:
        """Stop the workers and their processes (what is being compiled is left unfinished:
        its temporary directory is removed)."""
        with self._lock:
            self._closed = True
            self._waiting.clear()
            self._lock.notify_all()
        for process in self._processes:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
        for worker in self._workers:
            worker.join()
        for errors in self._errors.values():
            errors.close()

    def _work(self) -> None:
        process: subprocess.Popen[str] | None = None
        try:
            while True:
                with self._lock:
                    while not self._waiting and not self._closed:
                        self._lock.wait()
                    if self._closed:
                        return
                    entry = self._waiting.pop()
                    self._busy += 1
                try:
                    if process is None:
                        process = self._start()
                    found = self._compile(process, entry)
                except Exception as exc:  # a full disk too: never a worker that stops silently
                    failure = (
                        exc
                        if isinstance(exc, InstallError)
                        else InstallError(
                            f"compiling the bytecode of {entry.dist.name} failed: {exc}"
                        )
                    )
                    with self._lock:
                        self._failed.append(failure)
                        self._busy -= 1
                        self._lock.notify_all()
                    return
                with self._lock:
                    self._done[entry.sha256] = found
                    self._busy -= 1
                    self._lock.notify_all()
        finally:
            if process is not None:
                _stop(process)

    def _start(self) -> subprocess.Popen[str]:
        # read only when it fails (a pipe could fill up); closed by close()
        errors = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            process = subprocess.Popen(
                [self.python, "-S", "-s", "-c", _SCRIPT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                env=_child_env(),
            )
        except OSError as exc:
            errors.close()
            raise InstallError(f"cannot run {self.python} to compile bytecode: {exc}") from None
        with self._lock:
            self._processes.append(process)
            self._errors[id(process)] = errors
        hello = self._answer(process)
        if not isinstance(hello, dict) or hello.get("tag") != self.tag:
            raise self._broken(process, f"it reports the cache tag {hello!r}")
        return process

    def _answer(self, process: subprocess.Popen[str]) -> object:
        assert process.stdout is not None
        line = process.stdout.readline()
        try:
            return json.loads(line) if line else None
        except ValueError:
            return None

    def _broken(self, process: subprocess.Popen[str], why: str) -> InstallError:
        _stop(process)
        last = ""
        errors = self._errors.get(id(process))
        if errors is not None:
            with contextlib.suppress(OSError, ValueError):
                errors.seek(0)
                text = errors.read().decode("utf-8", "replace")
                last = (text.strip().splitlines() or [""])[-1]
        return InstallError(
            f"{self.python} did not compile bytecode for {self.tag} ({why}"
            + (f": {last}" if last else "")
            + ")",
            hint="pass `--no-compile` to apply without bytecode",
        )

    def _compile(self, process: subprocess.Popen[str], entry: StoreEntry) -> Bytecode:
        key = bytecode_key(entry.sha256, self.tag)
        temp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=self.store))
        try:
            job = [f"{entry.path}/site", f"{temp}/site", sources(entry)]
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps(job) + "\n")
                process.stdin.flush()
            except (OSError, ValueError):
                raise self._broken(process, "it stopped") from None
            rows = self._answer(process)
            if not isinstance(rows, list):
                raise self._broken(process, "it stopped")
            return _complete(self.store, entry, self.tag, temp, rows)
        finally:
            with contextlib.suppress(OSError):
                remove_sealed(temp)


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        if process.stdin is not None:
            process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _complete(
    store: Path, entry: StoreEntry, tag: str, temp: Path, rows: Sequence[Sequence[object]]
) -> Bytecode:
    """Write the RECORD with the ``.pyc`` rows and the marker, seal, rename into place."""
    record = f"{entry.dist.dist_info}/RECORD"
    text = entry.source_of(record).read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text += "\n"
    pyc: dict[str, str] = {}
    for source, compiled, digest, size in rows:
        pyc[str(source)] = str(compiled)
        text += f"{compiled},sha256={digest},{size}\n"
    target = temp / "site" / record
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    key = bytecode_key(entry.sha256, tag)
    marker = {
        "format": BYTECODE_FORMAT,
        "kind": BYTECODE_KIND,
        "wheel": entry.sha256,
        "tag": tag,
        "record": record,
        "pyc": pyc,
    }
    (temp / MARKER).write_text(json.dumps(marker, separators=(",", ":")), encoding="utf-8")
    seal(temp)
    final = store / key
    if final.exists() and lookup_bytecode(store, entry.sha256, tag) is None:
        remove_sealed(final)  # a leftover without a valid marker
    publish_sealed(temp, final)
    found = lookup_bytecode(store, entry.sha256, tag)
    if found is None:
        raise InstallError(f"bytecode entry of {entry.dist.name} is unreadable: {final}")
    return found
