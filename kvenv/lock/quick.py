"""What ``kvenv lock --check`` and an unchanged offline ``kvenv lock`` keep, so a repeat answers
without loading the profile (issue 13). Both start from the profile-facts record
(:mod:`kvenv.model.facts`), which says which files make up the profile and that it loaded and
validated with this kvenv.

- **Passed checks** (:func:`observe`, :func:`remember_passed`, :func:`recall_passed`): a
  check's verdict is a pure function of the profile, the lock's bytes, the host snapshot's
  bytes, the files it looks at beside them (:func:`kvenv.lock.check.files_read`: the places a
  locked wheel may be at hand, a ``path`` native wheel of no pinned size) and kvenv's code. A
  record is keyed by the profile's files (path and sha256 of each file of the ``extends``
  chain), the working directory, the lock's path and the artifact cache it looks in, and
  holds the digest of the profile that was checked, the sha256 of the lock and of the
  snapshot, the identity (device, inode, size, mtime, ctime, or absence) of every other file
  read, and the identity of kvenv's model, lock, ``_util`` and CLI code. The sha256s and
  identities are taken *before* the check reads the files, so an edit racing the check makes
  the next run miss. Any of them changed, or a profile whose recorded facts give another
  digest, is a miss: the full check runs again. Only a check that passed is recorded; a
  failing one always runs in full and reports every problem.
- **Lock inputs** (:func:`remember_inputs`, :func:`recall_inputs`): the offline lock memo
  (:mod:`kvenv.lock.memo`) is keyed by the bytes of the profile, its host snapshot and the
  lock; the snapshot's path is a field of the profile. It is recorded here, keyed like a
  passed check by the profile's files and the working directory, so the memo key can be made
  without loading the profile. The memo key still covers every file by its path and bytes,
  so a stale record can only cause a miss.

Records are small JSON files under the cache (beside the profile-facts records), written
atomically; a damaged or unreadable one is a miss, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvenv._util import jsonio
from kvenv._util.identity import code_identity, sha256_hex, small_sha256, stat_identity

CHECKS_DIR = "lock-checks-v1"
INPUTS_DIR = "lock-inputs-v1"
_KEEP = 64  # records kept per kind; the oldest go when more are written
# kvenv's code a verdict depends on: the package root's modules and these subpackages
_CODE_DIRS = ("model", "lock", "_util", "cli")


def _key(
    kind: str, chain: Sequence[Path], extra: Sequence[str], code: list[list[Any]] | None = None
) -> str | None:
    """The record key: kvenv's version and code (two kvenv installs sharing a cache keep
    their own records instead of replacing each other's), the working directory (relative
    paths), the profile's files with their sha256, and ``extra``; None when a file of the chain
    cannot be read. ``code``: the code's identity when the caller has it already."""
    from kvenv import __version__

    files = [[str(p), small_sha256(p)] for p in chain]
    if any(sha is None for _, sha in files):
        return None
    if code is None:
        code = code_identity()
    parts = [kind, __version__, code, str(Path.cwd()), files, list(extra)]
    return sha256_hex(json.dumps(parts).encode())[:32]


def _read(directory: Path, key: str | None) -> dict[str, Any] | None:
    if key is None:
        return None
    try:
        data = jsonio.loads_json(
            (directory / f"{key}.json").read_bytes(), file=f"{directory}/{key}.json"
        )
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write(directory: Path, key: str | None, data: Mapping[str, Any]) -> None:
    from kvenv._util.atomic import write_bytes

    if key is None:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_bytes(directory / f"{key}.json", json.dumps(data).encode(), durable=False)
        entries = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-_KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        return


def observe(lock: Path, snapshot: Path | None) -> dict[str, Any]:
    """What a check is about to read, taken *before* it reads it (so a file changed while the
    check runs is recorded as it was, and the next run misses): the lock's and the snapshot's
    sha256 and kvenv's code. The other files it reads are added as :func:`identities`."""
    return {
        "code": code_identity(),
        "lock": small_sha256(lock),
        "snapshot": None if snapshot is None else [str(snapshot), small_sha256(snapshot)],
        "read": [],
    }


def identities(paths: Iterable[Path]) -> list[list[Any]]:
    """(path, :func:`file_identity`) of each of ``paths``."""
    return [[str(p), stat_identity(p)] for p in paths]


def remember_passed(
    base: Path,
    chain: Sequence[Path],
    lock: Path,
    at_hand_root: Path,
    *,
    digest: str,
    observed: Mapping[str, Any],
    result: Mapping[str, Any],
) -> None:
    """Record that the check of ``lock`` (looking for wheels in ``at_hand_root``) passed for
    the profile whose files are ``chain`` and whose digest is ``digest`` (the digest of the
    profile the check held the lock against), with what it read (:func:`observe`, taken
    before the check); ``result`` is what it reports. Best effort. ``base``: the cache
    directory."""
    data = {**observed, "digest": digest, "result": dict(result)}
    key = _key("check", chain, [str(lock), str(at_hand_root)], observed["code"])
    _write(base / CHECKS_DIR, key, data)


def recall_passed(
    base: Path, chain: Sequence[Path], lock: Path, at_hand_root: Path, *, digest: str
) -> dict[str, Any] | None:
    """What :func:`remember_passed` recorded for this check, while every input is unchanged
    and the profile (whose digest the facts record gives) is the one checked; else None."""
    code = code_identity()
    data = _read(base / CHECKS_DIR, _key("check", chain, [str(lock), str(at_hand_root)], code))
    if data is None:
        return None
    try:
        if data["digest"] != digest:
            return None
        if data["lock"] is None or data["lock"] != small_sha256(lock):
            return None
        snapshot = data["snapshot"]
        if snapshot is not None and (
            snapshot[1] is None or small_sha256(Path(snapshot[0])) != snapshot[1]
        ):
            return None
        for path, identity in data["read"]:
            if stat_identity(Path(path)) != identity:
                return None
        if data["code"] != code:
            return None
        result = data["result"]
    except (KeyError, TypeError, IndexError, ValueError):
        return None
    return result if isinstance(result, dict) else None


def remember_inputs(base: Path, chain: Sequence[Path], snapshot: Path | None) -> None:
    """Record the host snapshot path of the profile whose files are ``chain``."""
    data = {"snapshot": None if snapshot is None else str(snapshot)}
    _write(base / INPUTS_DIR, _key("inputs", chain, []), data)


def recall_inputs(base: Path, chain: Sequence[Path]) -> dict[str, Path | None] | None:
    """``{"snapshot": path or None}`` as recorded for the profile whose files are ``chain``;
    None when there is no record."""
    data = _read(base / INPUTS_DIR, _key("inputs", chain, []))
    if data is None:
        return None
    snapshot = data.get("snapshot")
    if snapshot is not None and not isinstance(snapshot, str):
        return None
    return {"snapshot": None if snapshot is None else Path(snapshot)}
