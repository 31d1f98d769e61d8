"""Answers of ``kvenv apply`` (a no-op) and ``kvenv status`` remembered by the identity of
everything they read, so that repeating them costs file reads, not the model (issue 13).

The full path of each command decides its answer from the profile, the runtime root's state
files, the lock and (apply) the live host. Once it has, the CLI records that answer here with:

- the state of the root, captured by :func:`capture` *before* the full path read it: every
  plain file directly in the root (ownership marker, pointer, activation scripts, the root
  lock and its owner sidecar, present only while an apply runs) by the sha256 of its bytes;
  every entry of ``generations/`` with the sha256 of its manifest (or its absence); whether
  each directory the current manifest names exists; the lock file and the profile's recorded
  host snapshot by the sha256 of their bytes (or their absence);
- the profile by its facts record (:mod:`kvenv.model.facts`: valid only while every file of
  its ``extends`` chain has the same bytes), the resolved root and cache, the invocation
  inputs the answer depends on (``--keep`` and ``$KVENV_KEEP_GENERATIONS``, the host
  interpreter as resolved);
- for apply and plan, the live host's identity (:mod:`kvenv.probe.hostmemo`: the interpreter,
  its import path, every host read the probe made); for plan, also the entries of the cache
  and the store it looks up (:func:`capture_checks`: whether each artifact's cache entry is a
  directory, each store entry's marker by the sha256 of its bytes), captured before they are
  looked up, and a ``--host`` snapshot file by the sha256 of its bytes;
- kvenv's own code, by the stat of every module (another kvenv never reuses an answer).

:func:`recall_answer` captures all of it again and returns the answer only when everything is
identical; a file captured before the full path read it means a change made meanwhile is a
miss next time, never a stale answer. Anything different, missing or unreadable is a miss:
the command takes its full path, which decides (and reports) as before. Only answers of a
full path that succeeded are recorded. This module imports only the standard library.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvenv._util import jsonio
from kvenv._util.identity import code_identity, sha256_hex, small_sha256

ANSWERS_DIR = "quick-state-v1"
_KEEP_RECORDS = 64


def _entries(directory: str) -> list[os.DirEntry[str]] | None:
    try:
        with os.scandir(directory) as found:
            return sorted(found, key=lambda e: e.name)
    except OSError:
        return None


def _current_dirs(manifest: str) -> list[str] | None:
    try:
        with open(manifest, "rb") as stream:
            dirs = jsonio.loads_json(stream.read(), file=manifest)["dirs"]
        return [str(dirs[k]) for k in ("native", "overlay", "bin")]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def capture_checks(checks: list[list[str]]) -> list[list[Any]]:
    """Each ``[kind, path]`` as the full path sees it: ``dir`` whether ``path`` is a directory
    (an artifact's cache entry), ``file`` the sha256 of its bytes, or None (a store marker)."""
    return [
        [kind, path, os.path.isdir(path) if kind == "dir" else small_sha256(path)]
        for kind, path in checks
    ]


def capture(
    root: str,
    generations: str,
    pointer: str,
    manifest_name: str,
    files: list[str],
    checks: list[list[str]] | None = None,
    absent_ok: bool = False,
) -> dict[str, Any] | None:
    """The root's state as the full path reads it (see the module), with ``checks``
    (:func:`capture_checks`) when given; None when it cannot be captured (then nothing is
    recorded or recalled). With ``absent_ok`` a root that does not exist at all is a state
    too (nothing applied: a plan before the first apply)."""
    top = _entries(root)
    absent = top is None and absent_ok and not os.path.lexists(root)
    if top is None and not absent:
        return None
    root_files: list[list[Any]] | None = None  # absent
    if top is not None:
        root_files = [
            [entry.name, "dir" if entry.is_dir(follow_symlinks=False) else small_sha256(entry.path)]
            for entry in top
        ]
    gens: list[list[Any]] = []
    for entry in _entries(generations) or []:
        gens.append(
            [entry.name, entry.is_dir(), small_sha256(os.path.join(entry.path, manifest_name))]
        )
    current: list[list[Any]] = []
    try:
        with open(pointer, "rb") as stream:
            generation = jsonio.loads_json(stream.read(), file=str(pointer))["generation"]
    except (OSError, ValueError, KeyError, TypeError):
        generation = None
    if isinstance(generation, str) and os.sep not in generation:
        dirs = _current_dirs(os.path.join(generations, generation, manifest_name))
        if dirs is None:
            return None
        current = [[d, os.path.isdir(d)] for d in dirs]
    state: dict[str, Any] = {
        "root": root_files,
        "generations": gens,
        "current": current,
        "files": [[f, small_sha256(f)] for f in files],
    }
    if checks is not None:
        state["checks"] = capture_checks(checks)
    return state


def capture_tree(top: str, *, ctime: bool = True) -> list[list[Any]] | None:
    """Every file under ``top`` (a bundle) by its identity: device, inode, size, mtime and
    ctime (the kernel sets ctime on every write, rename or ``utime``: the identity
    :mod:`kvenv.fetch.bundleseal` trusts); None when ``top`` cannot be listed. Without
    ``ctime`` (an artifact's cache entry: what :class:`kvenv.fetch.cache.ArtifactCache` trusts
    is inode, size and mtime, and a hard link to a cached wheel changes only its ctime)."""
    found: list[list[Any]] = []
    stack = [top]
    while stack:
        directory = stack.pop()
        entries = _entries(directory)
        if entries is None:
            return None
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=True)
                is_dir = entry.is_dir()
            except OSError:
                return None
            if is_dir:
                stack.append(entry.path)
            found.append(
                [entry.path, is_dir, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                 st.st_ctime_ns if ctime else None]
            )  # fmt: skip
    return sorted(found)


def capture_inputs(
    files: list[str], checks: list[list[str]], trees: list[str], entries: list[str]
) -> dict[str, Any]:
    """What a recall that depends on no runtime root reads (a whole generation recalled into
    a new root, :mod:`kvenv.env.recall`): ``files`` by the sha256 of their bytes (or their
    absence), ``checks`` (:func:`capture_checks`), every file under each of ``trees`` (a
    bundle) by :func:`capture_tree` and under each of ``entries`` (an artifact's cache entry)
    by the identity the cache trusts (``capture_tree`` without ctime)."""
    return {
        "files": [[f, small_sha256(f)] for f in files],
        "checks": capture_checks(checks),
        "trees": [[t, capture_tree(t)] for t in trees],
        "entries": [[e, capture_tree(e, ctime=False)] for e in entries],
    }


def _record_path(directory: Path, key: Mapping[str, Any], code: list[list[Any]]) -> Path:
    """Where the record of ``key`` made by the kvenv whose code is ``code`` lives: two kvenv
    installs sharing a cache (before and after an upgrade, or side by side) keep their own
    records instead of replacing each other's at every run."""
    name = sha256_hex(json.dumps([key, code], sort_keys=True).encode())[:32]
    return directory / f"{name}.json"


def remember_answer(
    directory: Path,
    key: Mapping[str, Any],
    where: Mapping[str, Any],
    state: Mapping[str, Any],
    answer: Mapping[str, Any],
    host: Mapping[str, Any] | None = None,
) -> None:
    """Record ``answer`` for ``key`` (the command, the profile's facts, the paths, the
    inputs), valid while :func:`capture` of ``where`` gives ``state`` (captured before the
    full path read the root) and, when given, the live host is ``host``. Best effort."""
    from kvenv._util.atomic import write_json_streamed

    code = code_identity()
    data = {
        "key": dict(key),
        "where": dict(where),
        "state": dict(state),
        "code": code,
        "host": None if host is None else dict(host),
        "answer": dict(answer),
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_json_streamed(_record_path(directory, key, code), data, durable=False)
        records = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in records[:-_KEEP_RECORDS]:
            old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        return


def recall_answer(directory: Path, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer recorded for ``key`` when the root, the code and (when recorded) the host
    are as they were; else None."""
    code = code_identity()
    try:
        record = _record_path(directory, key, code)
        data = jsonio.loads_json(record.read_bytes(), file=str(record))
        if data["key"] != json.loads(json.dumps(dict(key))):
            return None
        where = data["where"]
        if "inputs" in where:
            state: Any = capture_inputs(**where["inputs"])
        elif "tree" in where:
            state = {"tree": capture_tree(where["tree"])}
        else:
            state = capture(
                where["root"], where["generations"], where["pointer"], where["manifest_name"],
                list(where["files"]), where.get("checks"), bool(where.get("absent_ok")),
            )  # fmt: skip
        if state is None or state != data["state"] or data["code"] != code:
            return None
        if data["host"] is not None:
            from kvenv.probe.hostmemo import host_unchanged

            if not host_unchanged(data["host"]):
                return None
        answer = data["answer"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return answer if isinstance(answer, dict) else None
