"""The one memo: a value kept while every input it was computed from is unchanged.

A record is a **kind** (one of :data:`KINDS`), a **key** (JSON: what was asked), the
**dependencies** the value was computed from, and the **value** (JSON). :func:`get` captures
every dependency again and returns the value only when each is what it was; anything
different, missing, unreadable or unknown is a miss (``None``), never an error: the caller
takes its full path, which decides and reports as always. :func:`put` is best effort.

Dependencies are ``[kind, argument, value]`` of a small closed set (:data:`DEPENDENCIES`):

- ``bytes``: a file by the sha256 of its bytes (None: not readable);
- ``stat``: a file or directory by its identity (:func:`kvenv._util.identity.stat_identity`);
- ``isdir``: whether a path is a directory;
- ``listing``: a directory's entries (name, is a directory), sorted (None: not listable);
- ``tree``: every file and directory under a path by identity (``[path, ctime]``: with or
  without ctime; an artifact cache entry is trusted by inode, size and mtime, and linking
  one of its files changes its ctime);
- ``env``: an environment variable by the sha256 of its value (a name ending in ``*`` with a
  list of names left out: every variable of that prefix);
- ``host``: the live host interpreter, a probe's identity
  (:func:`kvenv.probe.host.watch_probe`), checked by the ``host`` callable the caller
  passes to :func:`get` (the probe layer's replay; without one it is a miss);
- ``code``: kvenv's own code as a whole (every module, by identity; a single-file bundle by
  its archive). :func:`put` adds it to every record: another kvenv never reuses a value.

**The recording seam.** What a full path reads is recorded as it reads it, not listed beside
it: inside ``with recording() as reads``, every small file read through :func:`read_bytes`
and every dependency noted with :func:`note` (by the canonical readers: the profile loader,
the root's pointer and manifest reader, the lock reader) lands in ``reads.deps``, with the
sha256 of the very bytes that were parsed. The caller adds what no file read shows (the host,
the invocation's variables) and keeps the value with :func:`put`.

One layout (``<memo root>/memo-v1/<kind>/<sha256>.json``), one document shape with one
version (:data:`MEMO_FORMAT`), one writer (:func:`kvenv._util.atomic.write_bytes`), one eviction
rule (the oldest records of a kind beyond its :data:`KINDS` count go when one is written),
one hash (sha256 over the canonical JSON of the kind, key and code). Standard library only:
it is on every start-up path.
"""

from __future__ import annotations

import json
import os

from kvenv._util.identity import code_digest, of_stat, sha256_hex, small_sha256, stat_identity

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time: this module is on every start-up path
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import Any

    Dep = list[Any]

MEMO_FORMAT = 1
LAYOUT = "memo-v1"
# Every record kind, with how many of its records are kept (the oldest go beyond it).
KINDS: dict[str, int] = {
    "profile-facts": 64,  # a validated profile's facts (kvenv.model.facts)
    "lock-check": 64,  # a passed `kvenv lock --check` (kvenv.lock.quick)
    "lock-result": 16,  # an offline lock's text and summary (kvenv.lock.quick)
    "answer": 64,  # what a no-op apply, status or plan answered (kvenv.env.answers)
    "generation": 16,  # a generation built into a new root, to replay (kvenv.env.recall)
    "bundle": 64,  # a bundle opened and verified (kvenv.fetch.bundle)
    "activation": 64,  # a root's applied activation for a profile (kvenv.env.runenv)
    "interpreter": 64,  # another interpreter's own facts (kvenv.probe.pyinfo)
}
DEPENDENCIES = frozenset({"bytes", "stat", "isdir", "listing", "tree", "env", "host", "code"})


# -- capturing a dependency ---------------------------------------------------------------


def _listing(path: str) -> list[list[Any]] | None:
    try:
        with os.scandir(path) as scan:
            return sorted([e.name, e.is_dir()] for e in scan)
    except OSError:
        return None


def _tree(top: str, ctime: bool) -> list[list[Any]] | None:
    found: list[list[Any]] = []
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError:
            return None
        for entry in entries:
            try:
                st = entry.stat()
                is_dir = entry.is_dir()
            except OSError:
                return None
            if is_dir:
                stack.append(entry.path)
            dev, ino, size, mtime, change = of_stat(st)
            found.append([entry.path, is_dir, dev, ino, size, mtime, change if ctime else None])
    return sorted(found)


def _env(argument: Any) -> str:
    if isinstance(argument, str):
        value = os.environ.get(argument)
        return sha256_hex(json.dumps(value).encode("utf-8", "surrogateescape"))
    prefix, left_out = argument[0].rstrip("*"), set(argument[1])
    items = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(prefix) and k not in left_out
    )
    return sha256_hex(json.dumps(items).encode("utf-8", "surrogateescape"))


def capture(kind: str, argument: Any) -> Any:
    """The value of the dependency ``[kind, argument]`` now (ValueError: not a kind of
    :data:`DEPENDENCIES` that can be captured here; ``host`` is the caller's)."""
    if kind == "bytes":
        return small_sha256(argument)
    if kind == "stat":
        return stat_identity(argument)
    if kind == "isdir":
        return os.path.isdir(argument)
    if kind == "listing":
        return _listing(argument)
    if kind == "tree":
        return _tree(argument[0], bool(argument[1]))
    if kind == "env":
        return _env(argument)
    if kind == "code":
        return code_digest()
    raise ValueError(f"not a dependency kvenv captures: {kind}")


def dep(kind: str, argument: Any) -> Dep:
    """``[kind, argument, its value now]``."""
    return [kind, argument, capture(kind, argument)]


# -- the recording seam -------------------------------------------------------------------


class Reads:
    """The dependencies recorded while a full path ran (see the module)."""

    __slots__ = ("deps",)

    def __init__(self) -> None:
        self.deps: list[Dep] = []

    def add(self, kind: str, argument: Any, value: Any = ...) -> None:
        """Record ``[kind, argument, value]`` (captured now when no value is given)."""
        self.deps.append([kind, argument, capture(kind, argument) if value is ... else value])


_ACTIVE: list[Reads] = []


class recording:
    """Record every dependency noted while the ``with`` block runs (nested: each level)."""

    def __enter__(self) -> Reads:
        self.reads = Reads()
        _ACTIVE.append(self.reads)
        return self.reads

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.remove(self.reads)


def note(kind: str, argument: Any, value: Any = ...) -> None:
    """Record ``[kind, argument, value]`` in every active recording (captured now when no
    value is given, once for all of them); nothing when none is active."""
    if not _ACTIVE:
        return
    if value is ...:
        value = capture(kind, argument)
    for reads in _ACTIVE:
        reads.deps.append([kind, argument, value])


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the small file at ``path`` (OSError as ``open`` raises it), noted as a
    ``bytes`` dependency of what they were: the sha256 of these very bytes, or None when the
    file could not be read."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as stream:
            data = stream.read()
    except OSError:
        note("bytes", name, None)
        raise
    if _ACTIVE:
        note("bytes", name, sha256_hex(data))
    return data


# -- records ------------------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def record_path(root: Path, kind: str, key: Any) -> Path:
    """Where the record of ``key`` of ``kind`` made by this kvenv lives under ``root``."""
    text = json.dumps([MEMO_FORMAT, kind, key, code_digest()], sort_keys=True)
    return root / LAYOUT / kind / f"{sha256_hex(text.encode('utf-8', 'surrogateescape'))}.json"


def _holds(dependency: Any, host: Callable[[Any], bool] | None) -> bool:
    kind, argument, value = dependency
    if kind == "host":
        return host is not None and bool(host(value))
    return bool(capture(kind, argument) == value)


def get(
    root: Path, kind: str, key: Any, *, host: Callable[[Any], bool] | None = None
) -> Any | None:
    """The value kept for ``key`` of ``kind`` when every dependency it was computed from is
    unchanged (``host``: checks a ``host`` dependency against the live host); else None."""
    try:
        path = record_path(root, kind, key)
        with open(path, "rb") as stream:
            data = json.loads(stream.read())
        if data["format"] != MEMO_FORMAT or data["kind"] != kind or data["key"] != _canonical(key):
            return None
        for dependency in data["deps"]:
            if not _holds(dependency, host):
                return None
        return data["value"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def put(root: Path, kind: str, key: Any, deps: Iterator[Dep] | list[Dep], value: Any) -> None:
    """Keep ``value`` for ``key`` of ``kind``, valid while ``deps`` (and kvenv's code) hold.
    Best effort: a record that cannot be written is a miss next time, nothing else."""
    from kvenv._util.atomic import write_bytes

    if kind not in KINDS:
        raise ValueError(f"not a memo kind: {kind} (add it to kvenv._util.memo.KINDS)")
    data = {
        "format": MEMO_FORMAT,
        "kind": kind,
        "key": key,
        "deps": [*deps, ["code", None, code_digest()]],
        "value": value,
    }
    try:
        # not sorted: a value keeps its order (a status or plan document is printed as kept)
        text = json.dumps(data, allow_nan=False).encode("utf-8", "surrogateescape")
        path = record_path(root, kind, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, text, durable=False)
        _evict(path.parent, KINDS[kind])
    except (OSError, ValueError, TypeError):
        return


def _evict(directory: Path, keep: int) -> None:
    """The one eviction rule: the oldest records beyond ``keep`` go."""
    with os.scandir(directory) as scan:
        records = [(e.stat().st_mtime_ns, e.path) for e in scan if e.name.endswith(".json")]
    if len(records) <= keep:
        return
    for _, path in sorted(records)[: len(records) - keep]:
        try:
            os.unlink(path)
        except OSError:
            continue
