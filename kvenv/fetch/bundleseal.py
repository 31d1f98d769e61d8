"""Identity seals of bundle files verified once, so that ``kvenv apply --from DIR`` does not
re-hash an unchanged bundle on every run (issue 13).

After :func:`kvenv.fetch.bundle.open_bundle` has hashed a bundle file and found the sha256 its
``SHA256SUMS`` lists, it records the file's identity beside that sha256: device, inode, size,
mtime and ctime (``st_ctime_ns``: the kernel sets it on every write, rename or ``utime``, and
no unprivileged call sets it back, so bytes changed "in place" with the old mtime restored still
change it). The next apply re-hashes only the files whose identity or listed sha256 differs.
The record lives in kvenv's cache (``<cache>/bundle-seals-v1/<digest of the bundle's path>.json``),
never in the bundle, which may be read-only (a Kaggle dataset).

A seal is a memo of a verification, trusted like the artifact cache's ``.verified`` markers:
whoever can write kvenv's cache can also replace the cached wheels. ``kvenv bundle verify``
and ``kvenv apply --repair`` do not read seals: they hash every file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from kvenv._util import atomic, jsonio

SEALS_DIR = "bundle-seals-v1"
BUNDLE_SEAL_FORMAT = 1

# [sha256 listed in SHA256SUMS, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns]
Identity = list[str | int]


def identity_of(sha256: str, info: os.stat_result) -> Identity:
    """What a verified file's seal records: its listed sha256 and who it is on disk."""
    return [sha256, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def seal_path(seals: Path, root: Path) -> Path:
    """Where the seal of the bundle at ``root`` (an absolute path) is kept."""
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return seals / SEALS_DIR / f"{key}.json"


def read_bundle_seal(seals: Path, root: Path) -> dict[str, Identity]:
    """``relative path -> identity`` of the files verified in an earlier run; empty when there
    is no readable seal for this bundle (then every file is hashed)."""
    try:
        seal = seal_path(seals, root)
        data = jsonio.loads_json(seal.read_text(encoding="utf-8"), file=str(seal))
    except (OSError, ValueError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("format") != BUNDLE_SEAL_FORMAT
        or data.get("root") != str(root)
        or not isinstance(data.get("files"), dict)
    ):
        return {}
    return {
        rel: ident
        for rel, ident in data["files"].items()
        if isinstance(rel, str) and isinstance(ident, list) and len(ident) == 6
    }


def write_bundle_seal(seals: Path, root: Path, files: dict[str, Identity]) -> None:
    """Record the identities of the files just verified; a cache that cannot be written only
    costs the next run a full check."""
    document = {"format": BUNDLE_SEAL_FORMAT, "root": str(root), "files": files}
    with contextlib.suppress(OSError):
        atomic.write_json(seal_path(seals, root), document, durable=False, make_parents=True)
