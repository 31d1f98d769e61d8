"""What the native wheel's shared objects link, read at lock time from their ELF headers
(:mod:`kvenv._util.elf`) and recorded in the lock (``[[tool.kvenv.native.linkage]]``), so
``kvenv plan`` checks it offline against the host (:mod:`kvenv.probe.linkage`).

Only each ``*.so`` member's headers are read: the ELF header, the program headers, the dynamic
segment and the library names. A local wheel (a ``path`` source, a wheelhouse) is read in
place; a remote one (an index, ``url`` or ``hf`` source) through HTTP range requests of the
members alone, as the lock reads metadata. A deflated member is inflated from its start up to
its dynamic segment (which linkers put after the code), never written anywhere; a stored one
costs a few small ranges. What a remote wheel links is kept in the lock's index cache by the
wheel's sha256 (so ``--offline --fresh`` gives the same lock). Unreachable sources (offline,
no range support) fall back to the previous lock's record for the same wheel, else to no
record (``plan`` says untested).
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import attrs

from kvenv._util.elf import Dynamic, ElfError, ReadAt, read_dynamic
from kvenv.errors import FetchError, IntegrityError
from kvenv.lock.cache import IndexCache
from kvenv.lock.finder import Finder, WheelFile
from kvenv.lock.metadata import RangeFile, remote_tail
from kvenv.lock.native import hf_url, previous_native
from kvenv.lock.pylock import LinkedObject, LockFile
from kvenv.model.loading import LoadedProfile
from kvenv.model.profile import HfSource, IndexSource, Native, PathSource, UrlSource

# A member whose file name ends like a shared library: libx.so, _C.abi3.so, libcudart.so.13.
_SHARED = re.compile(r"[^/]+\.so(\.[0-9]+)*")
# What a member reader keeps of each object's start: the ELF and program headers and, in
# most objects, the dynamic string table, so the names are read without inflating it again.
_PREFIX = 4 << 20
# How far into a compressed object its headers may send the reader (the largest shared
# objects of CUDA builds are 1-2 GB): a hostile member cannot make the lock inflate for hours.
MAX_INFLATE = 4 << 30
_STEP = 1 << 20  # how much is inflated (and so asked of a remote file) at a time


def is_shared_object_name(member: str) -> bool:
    """Whether the archive path ``member`` is named like a shared object."""
    return _SHARED.fullmatch(member.rsplit("/", 1)[-1]) is not None


class _MemberReader:
    """``read_at`` over one compressed zip member: its first bytes kept, later ranges reached by
    inflating forward in small steps. (``ZipExtFile.seek`` asks its file for up to 16 MiB of
    compressed bytes at a time, which over a range-request file is a download far past the
    headers.)"""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._pos = 0
        self._prefix = self._take(_PREFIX)

    def _take(self, size: int) -> bytes:
        parts: list[bytes] = []
        left = size
        while left > 0:
            chunk = self._handle.read(min(left, _STEP))
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
        data = b"".join(parts)
        self._pos += len(data)
        return data

    def __call__(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0:
            return b""
        if offset + size <= len(self._prefix) or len(self._prefix) < _PREFIX:
            return self._prefix[offset : offset + size]
        if offset > MAX_INFLATE:
            raise ElfError(
                f"ELF headers point {offset} bytes into the object; kvenv inflates at most "
                f"{MAX_INFLATE} bytes of a compressed member to read them"
            )
        if offset < self._pos:  # behind us: inflate again from the start
            self._handle.seek(0)
            self._pos = 0
        while self._pos < offset:
            if not self._take(min(offset - self._pos, _STEP)):
                return b""
        return self._take(size)


_LOCAL_HEADER = struct.Struct("<4s5H3L2H")


def _stored_reader(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> ReadAt | None:
    """``read_at`` straight into the archive for a stored (uncompressed) member: each range
    is read where it lies, nothing before it. None for a compressed or encrypted member."""
    raw = archive.fp
    if raw is None or info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return None
    raw.seek(info.header_offset)
    header = raw.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        return None
    fields = _LOCAL_HEADER.unpack(header)
    start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
    size = info.file_size

    def read_at(offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset >= size:
            return b""
        raw.seek(start + offset)
        return raw.read(min(length, size - offset))

    return read_at


def _member_dynamic(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Dynamic | None:
    stored = _stored_reader(archive, info)
    if stored is not None:
        return read_dynamic(stored)
    with archive.open(info) as handle:
        return read_dynamic(_MemberReader(handle))


def archive_linkage(archive: zipfile.ZipFile, *, origin: str) -> list[LinkedObject]:
    """Every ELF shared object of ``archive`` with what it links, by path."""
    out: list[LinkedObject] = []
    for info in sorted(archive.infolist(), key=lambda i: i.filename):
        if info.is_dir() or not is_shared_object_name(info.filename):
            continue
        try:
            found = _member_dynamic(archive, info)
        except ElfError as exc:
            raise IntegrityError(
                f"{origin}: {info.filename} is not a readable ELF object: {exc.message}",
                hint="the wheel is damaged or not what its name says; use another build",
            ) from None
        except (OSError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
            raise IntegrityError(f"{origin}: cannot read {info.filename}: {exc}") from None
        if found is None:
            continue  # not ELF (a linker script, a Mach-O in a universal wheel)
        out.append(LinkedObject(info.filename, list(found.needed), found.soname))
    return out


def wheel_linkage(path: Path) -> list[LinkedObject]:
    """What the shared objects of the local wheel ``path`` link."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive_linkage(archive, origin=str(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise IntegrityError(f"not a readable wheel: {path}: {exc}") from None


def remote_linkage(session: Any, url: str, *, origin: str) -> list[LinkedObject]:
    """What the shared objects of the remote wheel at ``url`` link, by HTTP range requests
    (the whole file when the server ignores ranges)."""
    with _remote_archive(session, url) as raw:
        try:
            with zipfile.ZipFile(raw) as archive:
                return archive_linkage(archive, origin=origin)
        except (zipfile.BadZipFile, ValueError) as exc:
            raise FetchError(f"cannot read {origin} by range requests: {exc}") from None


def _remote_archive(session: Any, url: str) -> IO[bytes]:
    response, total = remote_tail(session, url)
    if total is None:
        return io.BytesIO(response.content)
    remote = RangeFile(session, str(response.url), total, response.content)
    return io.BufferedReader(remote, buffer_size=_STEP)


def native_linkage(
    loaded: LoadedProfile,
    *,
    previous: LockFile | None,
    finder: Finder | None,
    offline: bool,
    session: Callable[[], Any] | None = None,
) -> list[LinkedObject] | None:
    """What the profile's native wheel links, from wherever its bytes can be had cheaply;
    None when no source is reachable and no previous lock of the same wheel recorded it.
    ``offline`` reads no remote wheel (the cache and a local file still serve)."""
    native = loaded.profile.native
    if native is None:
        return None
    cache = finder.cache if finder is not None else None
    remote = not isinstance(native.source, PathSource)
    if cache is not None and remote:
        cached = _from_cache(cache.get_linkage(native.sha256))
        if cached is not None:
            return cached
    try:
        found = _from_source(loaded, native, finder, offline, session)
    except FetchError:
        found = None
    if found is None:
        entry = previous_native(native, previous)
        return entry.linkage if entry is not None else None
    if cache is not None and remote:
        cache.put_linkage(native.sha256, json.dumps([attrs.asdict(o) for o in found]).encode())
    return found


def _from_cache(data: bytes | None) -> list[LinkedObject] | None:
    """The record kept by an earlier lock, or None when there is none or it is unreadable
    (then it is read again from the wheel)."""
    if data is None:
        return None
    try:
        rows = json.loads(data)
        return [
            LinkedObject(str(r["path"]), [str(n) for n in r["needed"]], _text(r.get("soname")))
            for r in rows
        ]
    except (ValueError, TypeError, KeyError):
        return None


def _from_source(
    loaded: LoadedProfile,
    native: Native,
    finder: Finder | None,
    offline: bool,
    session: Callable[[], Any] | None,
) -> list[LinkedObject] | None:
    source = native.source
    if isinstance(source, PathSource):
        path = loaded.resolve(source.path)
        return wheel_linkage(path) if path.is_file() else None
    url: str | None = None
    if isinstance(source, IndexSource):
        if finder is None:
            return None
        for wheel in finder.project(native.name).wheels:
            if wheel.sha256 == native.sha256:
                local = wheel.local_path
                if local is not None:
                    return wheel_linkage(local)
                url = wheel.url
                break
        if url is None:
            return None
    elif isinstance(source, UrlSource):
        url = source.url
    elif isinstance(source, HfSource):
        url = hf_url(source)
    if url is None or offline:
        return None
    origin = f"the native wheel {native.name} {native.version}"
    if session is not None:
        return remote_linkage(session(), url, origin=origin)
    if finder is not None and isinstance(source, IndexSource):
        return remote_linkage(finder.session, url, origin=origin)
    import httpx2

    with httpx2.Client(timeout=30.0, follow_redirects=True) as client:
        return remote_linkage(client, url, origin=origin)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


# the overlay's libraries ---------------------------------------------------------------------
_LIBRARY = re.compile(r"lib[^/]*\.so(\.[0-9]+)*")


def archive_libraries(names: Iterable[str]) -> list[str]:
    """The shared libraries (``lib*.so*`` file names) among an archive's member ``names``."""
    return sorted({n.rsplit("/", 1)[-1] for n in names if _LIBRARY.fullmatch(n.rsplit("/", 1)[-1])})


def _wheel_libraries(wheel: WheelFile, session: Callable[[], Any] | None) -> list[str] | None:
    """The libraries the overlay wheel ships, from its central directory only; None when it
    cannot be read (the libraries it would provide are then not counted)."""
    local = wheel.local_path
    try:
        if local is not None:
            with zipfile.ZipFile(local) as archive:
                return archive_libraries(archive.namelist())
        if session is None:
            return None
        with _remote_archive(session(), wheel.url) as raw, zipfile.ZipFile(raw) as archive:
            return archive_libraries(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError, FetchError):
        return None


def overlay_provides(
    wheels: Iterable[WheelFile],
    wanted: set[str],
    *,
    cache: IndexCache | None,
    session: Callable[[], Any] | None,
) -> list[str]:
    """Which of the ``wanted`` libraries the overlay's binary wheels ship (a ``*-none-any``
    wheel ships none), read from each one's central directory: in place, else by one range
    request of its tail (``session`` None: remote wheels are not read); kept in ``cache`` by
    each wheel's sha256."""
    found: set[str] = set()
    if not wanted:
        return []
    for wheel in wheels:
        if wheel.filename.endswith("-none-any.whl"):
            continue
        key = f"libraries-{wheel.sha256}" if wheel.sha256 else None
        cached = cache.get_linkage(key) if cache is not None and key else None
        libraries = _from_json_list(cached)
        if libraries is None:
            libraries = _wheel_libraries(wheel, session)
            if libraries is not None and cache is not None and key:
                cache.put_linkage(key, json.dumps(libraries).encode())
        found |= wanted & set(libraries or ())
    return sorted(found)


def _from_json_list(data: bytes | None) -> list[str] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return [str(v) for v in value] if isinstance(value, list) else None
