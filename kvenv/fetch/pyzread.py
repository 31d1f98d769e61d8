"""Reading a single-file bundle (:mod:`kvenv.fetch.pyz`) once its verifier passed: its
manifest, its bundle's ``bundle.json`` and ``SHA256SUMS`` as plain JSON, and its small files
(profile, lock, host snapshot) unpacked into a per-digest directory.

Light on purpose: every command of the file (``status``, ``activate``) reads it first, so it
imports the standard library and kvenv's errors only; ``apply`` streams the wheels with
:func:`kvenv.fetch.pyz.stream_artifacts`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from kvenv._util.hashing import sha256_file
from kvenv.errors import InputError, IntegrityError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MANIFEST = "kvenv-pyz.json"
BUNDLE_DIR = "bundle"
# the directory bundle's names (kvenv.fetch.bundle's INDEX, SUMS and WHEELS), not imported
# from there: that module imports the whole fetch machinery
_INDEX = "bundle.json"
_SUMS = "SHA256SUMS"
_WHEELS = "wheels"
_SUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


class OpenedFile:
    """A verified single file, opened: its manifest, its bundle's index and sums."""

    __slots__ = ("index", "manifest", "path", "sha256", "sums")

    def __init__(
        self,
        path: Path,
        sha256: str,
        manifest: dict[str, Any],
        index: dict[str, Any],
        sums: dict[str, str],
    ) -> None:
        self.path, self.sha256, self.manifest = path, sha256, manifest
        self.index, self.sums = index, sums

    @property
    def profile_name(self) -> str:
        return str(self.index["profile"]["name"])

    @property
    def profile_file(self) -> str:
        return str(self.index["profile"]["file"])

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return list(self.index.get("artifacts", []))


def open_single_file(path: Path, sha256: str) -> OpenedFile:
    """Read the manifest, ``bundle.json`` and ``SHA256SUMS`` of a file the verifier passed
    (``sha256``: its whole digest). A file that is not laid out as kvenv writes it is an
    :class:`InputError`."""
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = json.loads(archive.read(MANIFEST))
            index = json.loads(archive.read(f"{BUNDLE_DIR}/{_INDEX}"))
            sums_text = archive.read(f"{BUNDLE_DIR}/{_SUMS}").decode("utf-8")
    except (KeyError, ValueError, zipfile.BadZipFile) as error:
        raise InputError(
            f"{path} is not laid out as kvenv writes a single-file bundle: {error}",
            hint="rebuild it with `kvenv bundle PROFILE --single-file FILE`",
        ) from None
    sums: dict[str, str] = {}
    for line in sums_text.splitlines():
        match = _SUM_LINE.fullmatch(line)
        if match is not None and _safe(match.group(2)):
            sums[match.group(2)] = match.group(1)
    profile = index.get("profile") if isinstance(index, dict) else None
    if (
        not isinstance(manifest, dict)
        or not isinstance(profile, dict)
        or not isinstance(profile.get("name"), str)
        or not _safe(str(profile.get("file", "")))
        or profile.get("file") not in sums
    ):
        raise InputError(
            f"{path}: {BUNDLE_DIR}/{_INDEX} names no profile listed in its {_SUMS}",
            hint="rebuild it with `kvenv bundle PROFILE --single-file FILE`",
        )
    return OpenedFile(Path(path), sha256, manifest, index, sums)


def _safe(text: str) -> bool:
    pure = PurePosixPath(text)
    return bool(text) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in text


def project_dir(opened: OpenedFile, cache_root: Path) -> Path:
    """Where the file's small files are unpacked: one directory per file digest."""
    return cache_root / "single-file" / opened.sha256[:24]


def unpack_project(opened: OpenedFile, cache_root: Path) -> Path:
    """The bundle's files but its wheels (profile, lock, snapshot, index, sums) in a
    per-digest directory of ``cache_root``, each checked against SHA256SUMS; unpacked again
    when one is missing or differs. Returns that directory."""
    directory = project_dir(opened, cache_root)
    wanted = {rel: sha for rel, sha in opened.sums.items() if not rel.startswith(_WHEELS + "/")}
    if _complete(directory, wanted):
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}-"))
    try:
        with zipfile.ZipFile(opened.path) as archive:
            for rel in [*wanted, _SUMS]:
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(archive.read(f"{BUNDLE_DIR}/{rel}"))
                if rel in wanted and not _matches(dest, wanted[rel]):
                    raise IntegrityError(f"{opened.path}: {BUNDLE_DIR}/{rel} differs from {_SUMS}")
        if _complete(directory, wanted):  # another process unpacked it meanwhile
            return directory
        if directory.exists():
            shutil.rmtree(directory)  # damaged: nothing reads it as it is
        try:
            os.replace(staging, directory)
        except OSError:
            if not _complete(directory, wanted):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _complete(directory: Path, wanted: dict[str, str]) -> bool:
    return all(_matches(directory / rel, sha) for rel, sha in wanted.items())


def _matches(path: Path, sha256: str) -> bool:
    try:
        return sha256_file(path)[0] == sha256
    except OSError:
        return False
