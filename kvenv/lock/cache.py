"""The lock engine's user cache: index pages by URL, wheel metadata by the wheel's sha256
(content-addressed), wheel digests of files whose index gave none, and parsed pages (the
target's wheels read from a page, kept so a warm lock does not parse the page again).

Location: ``$KVENV_CACHE_DIR`` if set, else the platform's user cache directory with a
``kvenv`` subdirectory (``$XDG_CACHE_HOME/kvenv`` or ``~/.cache/kvenv`` on Linux). Every
write goes through :mod:`kvenv._util.atomic`, so concurrent runs never see a torn entry
(entries are not fsynced: one lost in a crash is fetched again).
"""

from __future__ import annotations

import hashlib
import json
import marshal
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import atomic, jsonio


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
class PageHead:
    """What the cache records about a page besides its bytes: enough to decide whether it is
    fresh, to revalidate it, and to find its parsed form (``sha256`` of the bytes; None in
    entries written before it was recorded)."""

    url: str
    content_type: str
    fetched_at: float
    etag: str | None = None
    last_modified: str | None = None
    sha256: str | None = None
    empty: bool = False  # the index answered 404


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
    def put_page(self, page: CachedPage) -> PageHead:
        key = _digest(page.url)
        self._write(self._path("pages-v1", key, ".body"), page.content)
        head = PageHead(
            url=page.url,
            content_type=page.content_type,
            fetched_at=page.fetched_at,
            etag=page.etag,
            last_modified=page.last_modified,
            sha256=hashlib.sha256(page.content).hexdigest(),
            empty=not page.content,
        )
        self.put_head(head)
        return head

    def get_head(self, url: str) -> PageHead | None:
        """The head of a cached page, without reading its bytes."""
        path = self._path("pages-v1", _digest(url), ".json")
        raw = self._read(path)
        if raw is None:
            return None
        try:
            info: dict[str, Any] = jsonio.loads_json(raw, file=str(path))
            sha256 = info.get("sha256")
            return PageHead(
                url=url,
                content_type=str(info["content_type"]),
                fetched_at=float(info["fetched_at"]),
                etag=info.get("etag"),
                last_modified=info.get("last_modified"),
                sha256=sha256 if isinstance(sha256, str) else None,
                empty=info.get("empty") is True,
            )
        except (ValueError, KeyError, TypeError):
            return None

    def put_head(self, head: PageHead) -> None:
        """Write a page's head alone (a revalidated page whose bytes did not change)."""
        data = {
            "url": head.url,
            "content_type": head.content_type,
            "fetched_at": head.fetched_at,
            "etag": head.etag,
            "last_modified": head.last_modified,
            "sha256": head.sha256,
            "empty": head.empty,
        }
        self._write(self._path("pages-v1", _digest(head.url), ".json"), json.dumps(data).encode())

    def page_paths(self, url: str) -> tuple[Path, Path]:
        """The files of the cached page at ``url``: its head (JSON) and its bytes."""
        key = _digest(url)
        return self._path("pages-v1", key, ".json"), self._path("pages-v1", key, ".body")

    def get_body(self, url: str) -> bytes | None:
        return self._read(self._path("pages-v1", _digest(url), ".body"))

    # parsed pages: plain data (marshal: no code runs on load), bound to the page's sha256 ----
    def get_parsed(self, url: str, key: str, sha256: str) -> Any:
        """The parsed form of the page at ``url`` kept under ``key`` (what it was parsed for),
        if it was parsed from the bytes whose digest is ``sha256``; else None."""
        raw = self._read(self._path("parsed-v1", _digest(f"{url}\n{key}"), ".marshal"))
        if raw is None:
            return None
        try:
            record = marshal.loads(raw)
        except (ValueError, EOFError, TypeError):
            return None
        if not (isinstance(record, tuple) and len(record) == 3):
            return None
        if record[0] != key or record[1] != sha256:
            return None
        return record[2]

    def put_parsed(self, url: str, key: str, sha256: str, data: Any) -> None:
        path = self._path("parsed-v1", _digest(f"{url}\n{key}"), ".marshal")
        self._write(path, marshal.dumps((key, sha256, data)))

    # wheel metadata, by the wheel's sha256 (or by URL when the index gave no digest) --------
    @staticmethod
    def metadata_key(sha256: str | None, url: str) -> str:
        return f"sha256-{sha256}" if sha256 else f"url-{_digest(url)}"

    def get_metadata(self, key: str) -> bytes | None:
        return self._read(self._path("metadata-v1", key, ".METADATA"))

    def put_metadata(self, key: str, data: bytes) -> None:
        self._write(self._path("metadata-v1", key, ".METADATA"), data)

    # digests of files whose index gave none ------------------------------------------------
    def get_linkage(self, key: str) -> bytes | None:
        """JSON kept by :mod:`kvenv.lock.linkage` under ``key``: a native wheel's sha256 (what
        its shared objects link) or ``libraries-<sha256>`` (the libraries a wheel ships)."""
        return self._read(self._path("linkage-v1", key, ".json"))

    def put_linkage(self, key: str, data: bytes) -> None:
        self._write(self._path("linkage-v1", key, ".json"), data)

    def get_digest(self, key: str) -> tuple[str, int] | None:
        path = self._path("digests-v1", _digest(key), ".json")
        raw = self._read(path)
        if raw is None:
            return None
        try:
            data = jsonio.loads_json(raw, file=str(path))
            return str(data["sha256"]), int(data["size"])
        except (ValueError, KeyError, TypeError):
            return None

    def put_digest(self, key: str, sha256: str, size: int) -> None:
        data = json.dumps({"key": key, "sha256": sha256, "size": size}).encode()
        self._write(self._path("digests-v1", _digest(key), ".json"), data)
