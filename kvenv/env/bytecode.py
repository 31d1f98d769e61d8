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
import errno
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from kvenv.env.seal import remove_sealed, seal, seal_problem
from kvenv.env.store import MARKER, StoreEntry
from kvenv.errors import InstallError

BYTECODE_FORMAT = 1
KIND = "bytecode"

# Run by the host interpreter (``-S -s``: no site, no user site), standard library only. Reads
# ``[[source root, target root, [relative .py paths]], ...]`` on stdin; writes each file's
# unchecked-hash .pyc under the target root at the path ``cache_from_source`` gives under the
# source root (the code's file name is the relative path, so identical sources in two wheels
# compile to identical bytes; the import system sets the real path when it loads them), and
# prints ``{"tag": ..., "done": [[[rel, pyc rel, sha256 b64, size], ...], ...]}``.
_SCRIPT = r"""
import base64, hashlib, importlib.util, json, py_compile, sys
jobs = json.load(sys.stdin)
tag = sys.implementation.cache_tag
mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
done = []
for source_root, target_root, paths in jobs if tag else ():
    rows = []
    for rel in paths:
        source = source_root + "/" + rel
        pyc = importlib.util.cache_from_source(source)[len(source_root) + 1:]
        target = target_root + "/" + pyc
        try:
            py_compile.compile(source, target, rel, True, invalidation_mode=mode)
            with open(target, "rb") as stream:
                data = stream.read()
        except Exception:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
        rows.append([rel, pyc, digest, len(data)])
    done.append(rows)
json.dump({"tag": tag, "done": done}, sys.stdout)
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
            or data["kind"] != KIND
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
    compiled by ``python`` in up to ``jobs`` subprocesses and sealed into the store."""
    out: dict[str, Bytecode] = {}
    todo: list[StoreEntry] = []
    for sha, entry in entries.items():
        if not sources(entry):
            continue
        found = lookup_bytecode(store, sha, tag)
        if found is not None:
            broken = seal_problem(found.path)
            if broken is None and not full_check:
                out[sha] = found
                continue
            if broken is not None and on_damaged is not None:
                on_damaged(
                    f"bytecode of {entry.dist.name} {entry.dist.version} ({tag}) was changed "
                    f"after sealing ({broken.message}); compiled again"
                )
            remove_sealed(found.path)  # derived bytes: compiled again rather than checked
        todo.append(entry)
    if todo:
        out.update(_compile(store, todo, python=python, tag=tag, jobs=jobs))
    return {sha: out[sha] for sha in entries if sha in out}


def _groups(entries: Sequence[StoreEntry], count: int) -> list[list[StoreEntry]]:
    """``entries`` in ``count`` groups of about as many files each (largest first)."""
    groups: list[list[StoreEntry]] = [[] for _ in range(max(1, count))]
    sizes = [0] * len(groups)
    for entry in sorted(entries, key=lambda e: -len(sources(e))):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(entry)
        sizes[smallest] += len(sources(entry))
    return [g for g in groups if g]


def _compile(
    store: Path, entries: Sequence[StoreEntry], *, python: str, tag: str, jobs: int
) -> dict[str, Bytecode]:
    """Compile ``entries`` into temporary directories by ``python`` (one subprocess per group,
    the groups at once), then complete each as a sealed store entry."""
    from concurrent.futures import ThreadPoolExecutor

    temps: dict[str, Path] = {}
    try:
        for entry in entries:
            key = bytecode_key(entry.sha256, tag)
            temps[entry.sha256] = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=store))
        groups = _groups(entries, min(jobs, os.cpu_count() or 1, len(entries)))
        with ThreadPoolExecutor(len(groups), thread_name_prefix="kvenv-compile") as pool:
            results = list(pool.map(lambda g: _run(python, tag, g, temps), groups))
        out: dict[str, Bytecode] = {}
        for group, rows_per_entry in zip(groups, results, strict=True):
            for entry, rows in zip(group, rows_per_entry, strict=True):
                out[entry.sha256] = _complete(store, entry, tag, temps.pop(entry.sha256), rows)
        return out
    finally:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                remove_sealed(temp)


def _run(
    python: str, tag: str, group: Sequence[StoreEntry], temps: Mapping[str, Path]
) -> list[list[list[object]]]:
    """One compiling subprocess over ``group``: each entry's rows (see :data:`_SCRIPT`)."""
    jobs = [[f"{e.path}/site", f"{temps[e.sha256]}/site", sources(e)] for e in group]
    try:
        done = subprocess.run(
            [python, "-S", "-s", "-c", _SCRIPT],
            input=json.dumps(jobs),
            capture_output=True,
            text=True,
            check=False,
            env=_child_env(),
        )
    except OSError as exc:
        raise InstallError(f"cannot run {python} to compile bytecode: {exc}") from None
    try:
        answer = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("tag") != tag:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(
            f"{python} did not compile bytecode for {tag} (exit {done.returncode}: {last})",
            hint="pass `--no-compile` to apply without bytecode",
        )
    rows: list[list[list[object]]] = answer["done"]
    if len(rows) != len(group):
        raise InstallError(f"{python} compiled bytecode for {len(rows)} of {len(group)} wheels")
    return rows


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
        "kind": KIND,
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
    try:
        os.rename(temp, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        remove_sealed(temp)  # another process finished the same entry first
    found = lookup_bytecode(store, entry.sha256, tag)
    if found is None:
        raise InstallError(f"bytecode entry of {entry.dist.name} is unreadable: {final}")
    return found
