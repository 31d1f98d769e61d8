"""Single-file bundles: an offline bundle, kvenv and its pure-Python dependencies in one zip
application that the host's own interpreter runs (``python kvenv-PROFILE.pyz apply``).

Layout of the file (a zip archive; see ``docs/bundles.md``)::

    __main__.py                  the verifier (kvenv.cli.pyzboot), standard library only
    kvenv-pyz.json               what the file holds and which interpreters run it (schema 1)
    bundle/...                   the directory bundle of kvenv.fetch.bundle, as it is on disk:
                                 bundle.json, SHA256SUMS, profiles/, locks/, wheels/ (stored)
    lib/kvenv/...                kvenv's own code
    lib/<package>/...            its pure-Python dependencies the offline commands need, with
                                 their .dist-info
    (zip comment)                ``kvenv-pyz sha256=<hex>``: the sha256 of every byte before
                                 the 64 hex digits; the verifier checks it before anything else

:func:`make_single_file` builds it: the directory bundle into a temporary directory, then the
archive next to ``out`` and renamed into place. The reading side, used after the verifier
passed: :mod:`kvenv.fetch.pyzread` (the small files, profile, lock, snapshot, into a
per-digest directory of the user cache) and :func:`stream_artifacts` (the wheels an apply
needs streamed, hash-checked, into the artifact cache, never unpacked elsewhere).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import attrs
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from kvenv import __version__
from kvenv._util.hashing import copy_hashing, sha256_file
from kvenv._util.progress import Progress
from kvenv.errors import InputError, IntegrityError
from kvenv.fetch.bundle import INDEX, SUMS, WHEELS, BundledArtifact, BundleIndex, make_bundle
from kvenv.fetch.cache import ArtifactCache
from kvenv.fetch.pyzread import BUNDLE_DIR, MANIFEST, OpenedFile
from kvenv.model import convert, formats
from kvenv.model.loading import LoadedProfile

PYZ_KIND = "kvenv-pyz"
LIB = "lib"
MARK = b"kvenv-pyz sha256="
REQUIRES_LINE = "REQUIRES = (3, 10)  # oldest CPython: set by kvenv bundle --single-file"
DISTRIBUTION = "kvenv-overlay"
# kvenv's requirements the offline commands (apply --offline, verify, activate, status,
# plan) import; their own requirements come along. Every other requirement is left out, with
# the reason the file's --about prints (tests/unit/fetch/test_pyz.py checks that the two
# lists cover kvenv's requirements).
OFFLINE_NEEDS = (
    "attrs",
    "cattrs",
    "packaging",
    'tomli; python_version < "3.11"',
    "tomli-w",
    "installer",
    "filelock",
)
LEFT_OUT = {
    "isal": "native code; wheels are inflated with zlib instead (about half as fast)",
    "huggingface-hub": "downloads from the Hub; the file installs offline from its own wheels",
    "unearth": "finds wheels on an index; not used offline",
    "resolvelib": "resolves a lock; the file carries its lock",
    "shtab": "shell completion only",
    "tomlkit": "edits a profile in place (add, remove, pin); the file carries its lock",
}
_NATIVE = (".so", ".pyd", ".dylib", ".dll")
_SKIP_PARTS = {"__pycache__"}


@attrs.frozen
class SingleFile:
    """A single-file bundle written by :func:`make_single_file`."""

    path: Path
    sha256: str  # the whole file's (what ``sha256sum`` prints)
    size: int
    index: BundleIndex
    requires: tuple[int, int]
    included: list[tuple[str, str]]  # (distribution, version) in lib/, kvenv's own first
    left_out: dict[str, str]

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "size": self.size,
            "profile": self.index.profile.name,
            "requires_python": f"CPython >= {self.requires[0]}.{self.requires[1]}",
            "included": [{"name": n, "version": v} for n, v in self.included],
            "left_out": [{"name": n, "why": w} for n, w in self.left_out.items()],
            "artifacts": len(self.index.artifacts),
        }


# --- building ---------------------------------------------------------------------------------


def make_single_file(
    loaded: LoadedProfile,
    out: Path,
    *,
    boot: str,
    cache: Path | None = None,
    offline: bool = False,
    jobs: int = 8,
    progress: Progress | None = None,
    index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
) -> SingleFile:
    """Write the single-file bundle of ``loaded`` to ``out``; ``boot`` is the verifier's source
    (:mod:`kvenv.cli.pyzboot`). ``out`` is replaced whole or left as it was."""
    target = Path(out).expanduser().absolute()
    if target.is_dir():
        raise InputError(
            f"--single-file wants a file, and {target} is a directory",
            hint=f"name a file, such as {target / ('kvenv-' + loaded.profile.name + '.pyz')}",
        )
    if REQUIRES_LINE not in boot:
        raise InputError("the verifier's source has no REQUIRES line to set")
    libs = gather_libs()
    requires = oldest_python(libs)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.kvenv-new-"))
    try:
        info = make_bundle(
            loaded,
            work / BUNDLE_DIR,
            cache=cache,
            offline=offline,
            jobs=jobs,
            progress=progress,
            index_urls=index_urls,
            find_links=find_links,
        )
        members = [p for p in (work / BUNDLE_DIR).rglob("*") if p.is_file()]
        members += [p for lib in libs for p in lib.files.values()]
        modules = [p for p in members if p.suffix == ".py"]  # each with its bytecode, as big
        size = sum(p.stat().st_size for p in [*members, *modules])
        requires = zip_requires(size, len(members) + len(modules) + 2, requires)
        included = [(lib.name, lib.version) for lib in libs]
        manifest = {
            "schema": 1,
            "kind": PYZ_KIND,
            "kvenv_version": __version__,
            "created": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            "profile": info.index.profile.name,
            "requires_python": list(requires),
            "built_with": _interpreter(),
            "included": [{"name": n, "version": v} for n, v in included],
            "left_out": [{"name": n, "why": w} for n, w in LEFT_OUT.items()],
        }
        main = boot.replace(REQUIRES_LINE, REQUIRES_LINE.replace("(3, 10)", repr(requires)))
        part = work / "file.pyz"
        _write_archive(part, main, manifest, work / BUNDLE_DIR, libs)
        digest = seal_archive(part)
        os.replace(part, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return SingleFile(
        path=target,
        sha256=digest,
        size=target.stat().st_size,
        index=info.index,
        requires=requires,
        included=included,
        left_out=dict(LEFT_OUT),
    )


@attrs.frozen
class Lib:
    """One distribution that goes into ``lib/``: its files, by their path in the archive."""

    name: str
    version: str
    files: dict[str, Path]
    requires_python: str | None
    requirements: list[str]


def gather_libs() -> list[Lib]:
    """kvenv's own code and the closure of :data:`OFFLINE_NEEDS` as installed here; a
    distribution with native code is refused (it cannot run from a zip)."""
    package = Path(__file__).resolve().parent.parent  # kvenv/
    own = {
        f"kvenv/{p.relative_to(package).as_posix()}": p
        for p in sorted(package.rglob("*"))
        if p.is_file()
        and p.suffix in (".py", ".typed")
        and not _SKIP_PARTS & set(p.relative_to(package).parts)
    }
    libs = [Lib(DISTRIBUTION, __version__, own, ">=3.10", list(OFFLINE_NEEDS))]
    seen = {canonicalize_name(DISTRIBUTION)}
    pending = [Requirement(r) for r in OFFLINE_NEEDS]
    while pending:
        requirement = pending.pop(0)
        key = canonicalize_name(requirement.name)
        if key in seen or not _applies(requirement):
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise InputError(
                f"{requirement.name} is not installed in {sys.prefix}; the single file "
                "carries kvenv's dependencies from the environment that builds it",
                hint=f"install {DISTRIBUTION} with its dependencies, then run it again",
            ) from None
        libs.append(lib_of(dist))
        pending.extend(Requirement(r) for r in dist.requires or [])
    return libs


def _applies(requirement: Requirement, python: str | None = None) -> bool:
    if requirement.marker is None:
        return True
    environment = {"extra": ""}
    if python is not None:
        environment.update(python_version=python, python_full_version=python + ".0")
    return requirement.marker.evaluate(environment)


def lib_of(dist: metadata.Distribution) -> Lib:
    """The files of an installed distribution that go into ``lib/``; native code is refused."""
    name = dist.metadata["Name"]
    files: dict[str, Path] = {}
    for item in dist.files or []:
        posix = PurePosixPath(str(item))
        if posix.parts[0] == ".." or _SKIP_PARTS & set(posix.parts) or posix.suffix == ".pyc":
            continue
        if posix.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
            continue
        if posix.suffix in _NATIVE or ".so." in posix.name:
            raise InputError(
                f"{name} {dist.version} holds native code ({posix}), which a zip archive cannot "
                "run; the single file carries pure-Python dependencies only",
                hint=f"install the pure-Python build of {name}, or leave it out",
            )
        path = Path(str(dist.locate_file(item)))
        if path.is_file():
            files[posix.as_posix()] = path
    requires = dist.metadata["Requires-Python"]  # None when the field is absent
    return Lib(name, dist.version, files, requires, list(dist.requires or []))


def oldest_python(libs: Sequence[Lib]) -> tuple[int, int]:
    """The oldest CPython 3.x the libs run on: within every Requires-Python, and with no
    requirement that applies there (``tomli; python_version < "3.11"``) left out."""
    have = {canonicalize_name(lib.name) for lib in libs}
    requirements = [Requirement(r) for lib in libs for r in lib.requirements]
    current = sys.version_info[1]
    for minor in range(8, current + 1):
        version = f"3.{minor}"
        fits = all(
            SpecifierSet(lib.requires_python or "").contains(version + ".0", prereleases=True)
            for lib in libs
        )
        missing = any(
            canonicalize_name(r.name) not in have and _applies(r, version) for r in requirements
        )
        if fits and not missing:
            return 3, minor
    return 3, current


# Past 4 GiB or 65,535 members a zip needs its zip64 records, which zipimport reads from
# Python 3.13 on; the margin covers the headers and the central directory.
ZIP32_BYTES = 0xFFFFFFFF - (64 << 20)
ZIP32_MEMBERS = 0xFFFF - 16


def zip_requires(size: int, members: int, requires: tuple[int, int]) -> tuple[int, int]:
    """``requires``, raised to 3.13 when the archive of ``members`` files of ``size`` bytes
    in all needs zip64, which older zipimport cannot read."""
    if size > ZIP32_BYTES or members > ZIP32_MEMBERS:
        return max(requires, (3, 13))
    return requires


def _interpreter() -> str:
    version = ".".join(str(n) for n in sys.version_info[:3])
    return f"{sys.implementation.name} {version}"


def _write_archive(
    part: Path, main: str, manifest: dict[str, Any], bundle: Path, libs: Iterable[Lib]
) -> None:
    libs = list(libs)
    owners: dict[str, str] = {}
    for lib in libs:
        for name in lib.files:
            other = owners.setdefault(name, lib.name)
            if other != lib.name:
                raise InputError(
                    f"{lib.name} and {other} both ship {name}; the single file cannot hold both",
                    hint="uninstall one of them from the environment that builds the file",
                )
    with zipfile.ZipFile(part, "w") as archive:
        _add(archive, "__main__.py", main.encode(), compress=False)
        _add(archive, MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode(), compress=True)
        for lib in libs:  # first: zipimport before 3.13 reads no zip64 offsets
            for name, path in sorted(lib.files.items()):
                _add_file(archive, f"{LIB}/{name}", path, compress=True)
                if name.endswith(".py"):
                    code = _bytecode(path, f"{LIB}/{name}")
                    if code is not None:
                        _add(archive, f"{LIB}/{name}c", code, compress=True)
        files = sorted(p for p in bundle.rglob("*") if p.is_file())
        for path in sorted(files, key=lambda p: p.relative_to(bundle).parts[0] == WHEELS):
            relative = path.relative_to(bundle).as_posix()
            wheel = relative.startswith(WHEELS + "/")
            _add_file(archive, f"{BUNDLE_DIR}/{relative}", path, compress=not wheel)
        archive.comment = MARK + b"0" * 64


_EPOCH = (1980, 1, 1, 0, 0, 0)


def _bytecode(source: Path, name: str) -> bytes | None:
    """``source`` compiled for this interpreter, as an unchecked hash-based ``.pyc`` (the
    whole file is verified before any of it is imported): zipimport takes ``x.pyc`` beside
    ``x.py`` when its magic number is this interpreter's, and compiles ``x.py`` otherwise.
    None for a module this interpreter cannot compile (written for a newer Python)."""
    import importlib.util
    import marshal

    data = source.read_bytes()
    try:
        code = compile(data, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    flags = 0b01  # hash-based, unchecked (PEP 552)
    header = importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little")
    return header + importlib.util.source_hash(data) + marshal.dumps(code)


def _info(name: str, compress: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def _add(archive: zipfile.ZipFile, name: str, data: bytes, *, compress: bool) -> None:
    archive.writestr(_info(name, compress), data)


def _add_file(archive: zipfile.ZipFile, name: str, path: Path, *, compress: bool) -> None:
    info = _info(name, compress)
    info.file_size = path.stat().st_size  # zip64 fields only for a member that needs them
    with open(path, "rb") as src, archive.open(info, "w") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def seal_archive(path: Path) -> str:
    """Write the sha256 of every byte before them into the last 64 bytes (the comment's
    placeholder); the whole file's sha256."""
    size = path.stat().st_size
    with open(path, "r+b") as stream:
        stream.seek(size - 64 - len(MARK))
        if stream.read(len(MARK)) != MARK:
            raise IntegrityError(f"{path}: the archive does not end with its digest's place")
        body = hashlib.sha256()
        stream.seek(0)
        remaining = size - 64
        while remaining:
            chunk = stream.read(min(1 << 20, remaining))
            if not chunk:
                break
            body.update(chunk)
            remaining -= len(chunk)
        stream.seek(size - 64)
        stream.write(body.hexdigest().encode("ascii"))
    return sha256_file(path)[0]


# --- reading (after the verifier passed) ------------------------------------------------------


def stream_artifacts(
    opened: OpenedFile, cache: Path, *, progress: Progress | None = None
) -> list[str]:
    """Every artifact of the bundle not yet in the artifact cache ``cache``, streamed from the
    archive into it and checked (sha256, size) on the way; the names of those streamed."""
    store = ArtifactCache(cache)
    store.prepare()
    streamed: list[str] = []
    with zipfile.ZipFile(opened.path) as archive:
        for item in _artifacts(opened):
            if store.lookup(item.sha256, item.size, item.filename, rehash=False) is not None:
                continue
            label = f"{item.filename} (from {opened.path})"
            with store.writer(label, item.size) as (sink, part):
                with archive.open(f"{BUNDLE_DIR}/{item.file}") as source:
                    assert isinstance(source, io.BufferedIOBase)  # a ZipExtFile
                    copy_hashing(source, sink)
                sink.check(item.sha256, item.size)
            store.commit(part, item.sha256, item.filename)
            streamed.append(item.filename)
            if progress is not None:
                progress(item.filename, item.size, item.size)
    return streamed


def _artifacts(opened: OpenedFile) -> Iterator[BundledArtifact]:
    where = f"{opened.path}:{BUNDLE_DIR}/{INDEX}"
    formats.newer_format(
        opened.index, reads_up_to=formats.BUNDLE_FORMAT, file=where, what="bundle index"
    )
    index = convert.structure(
        opened.index, BundleIndex, file=where, what="bundle index", lenient=True
    )
    for item in index.artifacts:
        if opened.sums.get(item.file) != item.sha256:
            raise IntegrityError(
                f"{opened.path}: {item.file} differs from the bundle's {SUMS}",
                hint="rebuild the file with `kvenv bundle PROFILE --single-file FILE`",
            )
        yield item
