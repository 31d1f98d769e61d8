"""Core metadata of wheels: parsed (pure) and fetched (effects).

Fetch order: the cache (content-addressed by the wheel's sha256), then the PEP 658
``.metadata`` file where the index offers one (checked against its advertised sha256), then
HTTP range requests for the ``*.dist-info/METADATA`` member of the remote zip, then the whole
wheel. Local wheels are read in place.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import zipfile
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


class _RangeFile(io.RawIOBase):
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


def range_metadata(session: Any, url: str, name: str, *, origin: str) -> bytes:
    """The METADATA of a remote wheel, read with HTTP range requests (the whole file when the
    server ignores ranges)."""
    tail_size = 64 * 1024
    headers = {"Range": f"bytes=-{tail_size}", "Accept-Encoding": "identity"}
    try:
        response = session.get(url, headers=headers, follow_redirects=True)
    except Exception as exc:
        raise FetchError(f"cannot fetch {redact_url(url)}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 200:
        return _metadata_of_bytes(response.content, name, origin)
    if response.status_code != 206:
        raise FetchError(f"{redact_url(url)} answered HTTP {response.status_code}")
    total = response.headers.get("Content-Range", "").rpartition("/")[2]
    if not (total.isascii() and total.isdigit()):
        raise FetchError(f"{redact_url(url)} gave no Content-Range size")
    final_url = str(response.url)
    remote = _RangeFile(session, final_url, int(total), response.content)
    with zipfile.ZipFile(io.BufferedReader(remote, buffer_size=64 * 1024)) as archive:
        return metadata_from_zip(archive, name, origin=origin)


def _metadata_of_bytes(content: bytes, name: str, origin: str) -> bytes:
    with tempfile.TemporaryFile() as handle:
        handle.write(content)
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                return metadata_from_zip(archive, name, origin=origin)
        except zipfile.BadZipFile as exc:
            raise IntegrityError(f"{origin} is not a valid wheel: {exc}") from None
