"""The lock engine's user cache: index pages by URL, wheel metadata by the wheel's sha256
(content-addressed), and wheel digests of files whose index gave none.

Location: ``$KVENV_CACHE_DIR`` if set, else the platform's user cache directory with a
``kvenv`` subdirectory (``$XDG_CACHE_HOME/kvenv`` or ``~/.cache/kvenv`` on Linux). Every
write goes through :mod:`kvenv._util.atomic`, so concurrent runs never see a torn entry
(entries are not fsynced: one lost in a crash is fetched again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import atomic


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@attrs.frozen
class CachedPage:
    """One index page as fetched, with what revalidating it needs."""

    url: str
    content: bytes
    content_type: str
    fetched_at: float
    etag: str | None = None
    last_modified: str | None = None


@attrs.frozen
class IndexCache:
    """The lock engine's cache under ``root``."""

    root: Path

    def _path(self, kind: str, key: str, suffix: str) -> Path:
        return self.root / kind / key[:2] / f"{key}{suffix}"

    def _write(self, path: Path, data: bytes) -> None:
        atomic.write_bytes(path, data, durable=False, make_parents=True)

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except OSError:
            return None

    # index pages ---------------------------------------------------------------------------
    def get_page(self, url: str) -> CachedPage | None:
        key = _digest(url)
        head = self._read(self._path("pages-v1", key, ".json"))
        body = self._read(self._path("pages-v1", key, ".body"))
        if head is None or body is None:
            return None
        try:
            info: dict[str, Any] = json.loads(head)
            return CachedPage(
                url=url,
                content=body,
                content_type=str(info["content_type"]),
                fetched_at=float(info["fetched_at"]),
                etag=info.get("etag"),
                last_modified=info.get("last_modified"),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def put_page(self, page: CachedPage) -> None:
        key = _digest(page.url)
        self._write(self._path("pages-v1", key, ".body"), page.content)
        head = {
            "url": page.url,
            "content_type": page.content_type,
            "fetched_at": page.fetched_at,
            "etag": page.etag,
            "last_modified": page.last_modified,
        }
        self._write(self._path("pages-v1", key, ".json"), json.dumps(head).encode())

    # wheel metadata, by the wheel's sha256 (or by URL when the index gave no digest) --------
    @staticmethod
    def metadata_key(sha256: str | None, url: str) -> str:
        return f"sha256-{sha256}" if sha256 else f"url-{_digest(url)}"

    def get_metadata(self, key: str) -> bytes | None:
        return self._read(self._path("metadata-v1", key, ".METADATA"))

    def put_metadata(self, key: str, data: bytes) -> None:
        self._write(self._path("metadata-v1", key, ".METADATA"), data)

    # digests of files whose index gave none ------------------------------------------------
    def get_digest(self, key: str) -> tuple[str, int] | None:
        raw = self._read(self._path("digests-v1", _digest(key), ".json"))
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return str(data["sha256"]), int(data["size"])
        except (ValueError, KeyError, TypeError):
            return None

    def put_digest(self, key: str, sha256: str, size: int) -> None:
        data = json.dumps({"key": key, "sha256": sha256, "size": size}).encode()
        self._write(self._path("digests-v1", _digest(key), ".json"), data)
