"""Core metadata of wheels: parsed (pure) and fetched (effects).

Fetch order: the cache (content-addressed by the wheel's sha256), then the PEP 658
``.metadata`` file where the index offers one (checked against its advertised sha256), then
HTTP range requests for the ``*.dist-info/METADATA`` member of the remote zip, then the whole
wheel. Local wheels are read in place.
"""

from __future__ import annotations

import hashlib
import io
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import compat32
from pathlib import Path
from typing import Any

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kvenv._util.redact import redact_url
from kvenv.errors import FetchError, IntegrityError
from kvenv.lock.cache import IndexCache
from kvenv.lock.finder import WheelFile


@attrs.frozen
class DistMetadata:
    """What the resolver needs from a wheel's METADATA."""

    name: str
    version: Version
    requires: tuple[str, ...] = ()
    requires_python: str | None = None
    extras: tuple[str, ...] = ()

    def requirements(self) -> list[Requirement]:
        out = []
        for line in self.requires:
            try:
                out.append(Requirement(line))
            except InvalidRequirement:
                continue
        return out


def parse_metadata(data: bytes, *, origin: str) -> DistMetadata:
    """Parse a METADATA (or PKG-INFO) document."""
    message = BytesParser(policy=compat32).parsebytes(data, headersonly=True)
    name = message.get("Name")
    version = message.get("Version")
    if not name or not version:
        raise IntegrityError(f"metadata without Name/Version: {origin}")
    try:
        parsed_version = Version(str(version).strip())
    except InvalidVersion:
        raise IntegrityError(f"metadata with an invalid Version {version!r}: {origin}") from None
    requires = tuple(str(v).strip() for v in message.get_all("Requires-Dist") or [])
    extras = tuple(
        sorted({canonicalize_name(str(v).strip()) for v in message.get_all("Provides-Extra") or []})
    )
    requires_python = message.get("Requires-Python")
    return DistMetadata(
        name=str(name).strip(),
        version=parsed_version,
        requires=requires,
        requires_python=str(requires_python).strip() if requires_python else None,
        extras=extras,
    )


def metadata_from_zip(archive: zipfile.ZipFile, wheel_name: str, *, origin: str) -> bytes:
    """The METADATA member of a wheel's ``.dist-info`` directory."""
    wanted = canonicalize_name(wheel_name)
    candidates = [
        n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
    ]
    for member in candidates:
        dist = member.split("/", 1)[0][: -len(".dist-info")].rsplit("-", 1)[0]
        if canonicalize_name(dist) == wanted:
            return archive.read(member)
    if len(candidates) == 1:
        return archive.read(candidates[0])
    raise IntegrityError(f"no .dist-info/METADATA in {origin}")


def read_wheel_metadata(path: Path) -> DistMetadata:
    """The metadata of a local wheel file."""
    from packaging.utils import parse_wheel_filename

    try:
        name = str(parse_wheel_filename(path.name)[0])
    except ValueError:
        name = path.name.split("-", 1)[0]
    try:
        with zipfile.ZipFile(path) as archive:
            data = metadata_from_zip(archive, name, origin=str(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise IntegrityError(f"not a readable wheel: {path}: {exc}") from None
    return parse_metadata(data, origin=str(path))


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file fetched by HTTP range requests."""

    def __init__(self, session: Any, url: str, size: int, tail: bytes) -> None:
        super().__init__()
        self._session = session
        self._url = url
        self._size = size
        self._pos = 0
        self._chunks: dict[int, bytes] = {size - len(tail): tail}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _cached(self, start: int, end: int) -> bytes | None:
        for offset, data in self._chunks.items():
            if offset <= start and end <= offset + len(data):
                return data[start - offset : end - offset]
        return None

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if start >= end:
            return b""
        data = self._cached(start, end)
        if data is None:
            fetch_end = min(self._size, max(end, start + 256 * 1024))
            headers = {"Range": f"bytes={start}-{fetch_end - 1}", "Accept-Encoding": "identity"}
            response = self._session.get(self._url, headers=headers)
            if response.status_code != 206:
                raise FetchError(f"range request refused by {redact_url(self._url)}")
            self._chunks[start] = response.content
            data = response.content[: end - start]
        self._pos = start + len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class MetadataFetcher:
    """Gets (and caches) the metadata of index and wheelhouse wheels."""

    def __init__(
        self, cache: IndexCache, session: Callable[[], Any], *, offline: bool = False
    ) -> None:
        self.cache = cache
        self._session = session
        self.offline = offline

    def get(self, wheel: WheelFile) -> DistMetadata:
        key = IndexCache.metadata_key(wheel.sha256, wheel.url)
        data = self.cache.get_metadata(key)
        if data is None:
            data = self._fetch(wheel)
            self.cache.put_metadata(key, data)
        meta = parse_metadata(data, origin=wheel.filename)
        if canonicalize_name(meta.name) != wheel.name or meta.version != wheel.version:
            raise IntegrityError(
                f"{wheel.filename}: its metadata says {meta.name} {meta.version}",
                hint="the index serves a wheel whose metadata does not match its file name",
            )
        return meta

    def _fetch(self, wheel: WheelFile) -> bytes:
        local = wheel.local_path
        if local is not None:
            try:
                with zipfile.ZipFile(local) as archive:
                    return metadata_from_zip(archive, wheel.name, origin=str(local))
            except (OSError, zipfile.BadZipFile) as exc:
                raise IntegrityError(f"not a readable wheel: {local}: {exc}") from None
        if self.offline:
            raise FetchError(
                f"offline: no cached metadata for {wheel.filename}",
                hint="run `kvenv lock` once with network access to fill the cache",
            )
        session = self._session()
        if wheel.core_metadata:
            data = self._pep658(session, wheel)
            if data is not None:
                return data
        try:
            return self._by_range(session, wheel)
        except (FetchError, zipfile.BadZipFile, OSError, ValueError):
            return self._by_download(session, wheel)

    def _pep658(self, session: Any, wheel: WheelFile) -> bytes | None:
        try:
            response = session.get(wheel.url + ".metadata")
        except Exception:
            return None
        if response.status_code != 200:
            return None
        data: bytes = response.content
        expected = wheel.core_metadata_sha256
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise IntegrityError(f"PEP 658 metadata of {wheel.filename} does not match its hash")
        return data

    def _by_range(self, session: Any, wheel: WheelFile) -> bytes:
        return range_metadata(session, wheel.url, wheel.name, origin=wheel.filename)

    def _by_download(self, session: Any, wheel: WheelFile) -> bytes:
        try:
            response = session.get(wheel.url, follow_redirects=True)
        except Exception as exc:
            raise FetchError(f"cannot download {redact_url(wheel.url)}: {exc}") from None
        if response.status_code != 200:
            raise FetchError(f"{redact_url(wheel.url)} answered HTTP {response.status_code}")
        return _metadata_of_bytes(response.content, wheel.name, wheel.filename)


def remote_tail(session: Any, url: str) -> tuple[Any, int | None]:
    """A GET of the last 64 KiB of the remote file at ``url``: the response and the file's
    size (None when the server ignored the range and sent the whole file)."""
    headers = {"Range": f"bytes=-{64 * 1024}", "Accept-Encoding": "identity"}
    try:
        response = session.get(url, headers=headers, follow_redirects=True)
    except Exception as exc:
        raise FetchError(f"cannot fetch {redact_url(url)}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 200:
        return response, None
    if response.status_code != 206:
        raise FetchError(f"{redact_url(url)} answered HTTP {response.status_code}")
    total = response.headers.get("Content-Range", "").rpartition("/")[2]
    if not (total.isascii() and total.isdigit()):
        raise FetchError(f"{redact_url(url)} gave no Content-Range size")
    return response, int(total)


def range_metadata(session: Any, url: str, name: str, *, origin: str) -> bytes:
    """The METADATA of a remote wheel, read with HTTP range requests (the whole file when the
    server ignores ranges)."""
    response, total = remote_tail(session, url)
    if total is None:
        return _metadata_of_bytes(response.content, name, origin)
    found = metadata_from_tail(response.content, total, name)
    if found is not None:  # the usual case: the central directory and METADATA in the tail
        return found
    remote = RangeFile(session, str(response.url), total, response.content)
    with zipfile.ZipFile(io.BufferedReader(remote, buffer_size=64 * 1024)) as archive:
        return metadata_from_zip(archive, name, origin=origin)


_EOCD = struct.Struct("<4s4H2LH")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")


def metadata_from_tail(tail: bytes, total: int, wheel_name: str) -> bytes | None:
    """The METADATA member of a wheel whose last ``len(tail)`` bytes (of ``total``) are
    ``tail``, read without :mod:`zipfile` when the tail holds the whole central directory and
    the member (wheels put ``.dist-info`` last, so it usually does). None when it does not, or
    when anything is unusual (ZIP64, a prefix before the archive, encryption, a method other
    than stored or deflated, a size or CRC-32 that does not match): the caller then reads the
    archive with :mod:`zipfile`, which chooses the same member (:func:`metadata_from_zip`).
    Issue 13: zipfile builds an object for every member of the central directory."""
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or len(tail) - end < _EOCD.size:
        return None
    _, disk, cd_disk, _, entries, cd_size, cd_offset, comment = _EOCD.unpack_from(tail, end)
    start = total - len(tail)  # where the tail begins in the file
    if disk or cd_disk or end + _EOCD.size + comment != len(tail):
        return None
    if entries == 0xFFFF or cd_offset == 0xFFFFFFFF or cd_offset + cd_size != start + end:
        return None
    if cd_offset < start:
        return None
    at = cd_offset - start
    members: list[tuple[str, bytes, int, int, int, int, int, int]] = []
    for _ in range(entries):
        if at + _CENTRAL.size > end:
            return None
        fields = _CENTRAL.unpack_from(tail, at)
        if fields[0] != b"PK\x01\x02":
            return None
        flags, method, crc, csize, usize = fields[3], fields[4], fields[7], fields[8], fields[9]
        nlen, elen, clen, local = fields[10], fields[11], fields[12], fields[16]
        raw = tail[at + _CENTRAL.size : at + _CENTRAL.size + nlen]
        at += _CENTRAL.size + nlen + elen + clen
        if raw.endswith(b".dist-info/METADATA") and raw.count(b"/") == 1:
            member = raw.decode("utf-8" if flags & 0x800 else "cp437")
            members.append((member, raw, flags, method, crc, csize, usize, local))
    if at != end:
        return None
    wanted = canonicalize_name(wheel_name)
    chosen = next(
        (
            m
            for m in members
            if canonicalize_name(m[0].split("/", 1)[0][: -len(".dist-info")].rsplit("-", 1)[0])
            == wanted
        ),
        members[0] if len(members) == 1 else None,
    )
    if chosen is None:
        return None
    _, raw, flags, method, crc, csize, usize, local = chosen
    if flags & 0x1 or method not in (0, 8) or local < start:
        return None
    at = local - start
    if at + _LOCAL.size > len(tail):
        return None
    header = _LOCAL.unpack_from(tail, at)
    if header[0] != b"PK\x03\x04":
        return None
    if tail[at + _LOCAL.size : at + _LOCAL.size + header[9]] != raw:
        return None  # zipfile refuses a local name that differs from the directory's
    begin = at + _LOCAL.size + header[9] + header[10]
    data = tail[begin : begin + csize]
    if len(data) != csize:
        return None
    try:
        content = zlib.decompress(data, -15) if method == 8 else data
    except zlib.error:
        return None
    if len(content) != usize or zlib.crc32(content) != crc:
        return None
    return content


def _metadata_of_bytes(content: bytes, name: str, origin: str) -> bytes:
    found = metadata_from_tail(content, len(content), name)
    if found is not None:
        return found
    with tempfile.TemporaryFile() as handle:
        handle.write(content)
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                return metadata_from_zip(archive, name, origin=origin)
        except zipfile.BadZipFile as exc:
            raise IntegrityError(f"{origin} is not a valid wheel: {exc}") from None
