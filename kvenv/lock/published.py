"""The sha256 an index publishes for a wheel, read from kvenv's page cache only (offline):
``kvenv lock --check`` holds each locked wheel's sha256 against it where the page is cached,
and never asks the index.

A project's page is looked for on the index the lock names for the package (``index``), else
on the indexes configured where the check runs (:mod:`kvenv.lock.indexflags`). A PEP 691
JSON page is scanned for the one file (:mod:`kvenv.lock.pagescan`); an HTML page's link to
it gives its ``#sha256=`` fragment. Every cache file read is noted for the check's memo
(:mod:`kvenv.lock.quick`), so a page that changes makes the next check run in full.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from urllib.parse import urljoin

from packaging.utils import canonicalize_name

from kvenv._util import jsonio, memo
from kvenv.errors import FetchError
from kvenv.lock.cache import IndexCache
from kvenv.lock.pages import JSON_PAGE
from kvenv.lock.pagescan import page_files

# (name, filename, the lock's index or None) -> [(page URL, sha256 published)]
Published = Callable[[str, str, "str | None"], "list[tuple[str, str]]"]


def project_url(index: str, name: str) -> str:
    """The page of project ``name`` on ``index``."""
    return urljoin(index if index.endswith("/") else index + "/", f"{canonicalize_name(name)}/")


def published_in_cache(cache: IndexCache, indexes: Callable[[], Sequence[str]]) -> Published:
    """A lookup of the sha256 published for a wheel on the pages ``cache`` holds; ``indexes``
    gives the configured index URLs (asked once, when a package names none)."""
    configured: list[str] | None = None

    def lookup(name: str, filename: str, index: str | None) -> list[tuple[str, str]]:
        nonlocal configured
        if index is None and configured is None:
            # no page cached at all: no index is asked for its URL (the default one's comes
            # from unearth, a heavy import the check otherwise does without)
            configured = list(indexes()) if (cache.root / "pages-v1").is_dir() else []
        out = []
        for base in [index] if index is not None else configured or []:
            url = project_url(base, name)
            sha = _published(cache, url, filename)
            if sha is not None:
                out.append((url, sha))
        return out

    return lookup


def _published(cache: IndexCache, url: str, filename: str) -> str | None:
    head_path, body_path = cache.page_paths(url)
    try:
        head = jsonio.loads_json(memo.read_bytes(head_path), file=str(head_path))
        body = memo.read_bytes(body_path)
    except (OSError, ValueError):
        return None
    kind = head.get("content_type") if isinstance(head, dict) else None
    if not isinstance(kind, str) or not body:
        return None
    if kind.startswith(JSON_PAGE):
        try:
            files = page_files(body, url, lambda found: found == filename)[1]
        except FetchError:
            return None
        for file in files:
            hashes = file.get("hashes") if isinstance(file, dict) else None
            if file.get("filename") == filename and isinstance(hashes, dict):
                sha = hashes.get("sha256")
                return sha.lower() if isinstance(sha, str) else None
        return None
    text = body.decode("utf-8", "replace")
    found = re.search(re.escape(filename) + r"#sha256=([0-9a-fA-F]{64})", text)
    return found.group(1).lower() if found else None
