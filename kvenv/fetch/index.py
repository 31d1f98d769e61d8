"""Finding a profile's native wheel pinned by ``kind = "index"`` on a package index or in a
find-links location, with unearth (:func:`find_on_index`). A portable lock's wheels, known by
exact file name, are found by :mod:`kvenv.fetch.locate` instead.

The wheel is identified by name, exact version, file name (when the profile gives one) and
sha256: a link whose published hash differs is skipped, and the downloaded bytes are verified
like every other artifact. Compatibility with the running machine is ignored on purpose (the
wheel is for the profile's target). With no index URL given, unearth uses its default index.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kvenv._util.redact import redact_url
from kvenv._util.urls import check_url
from kvenv.errors import FetchError
from kvenv.model.profile import IndexSource


def find_on_index(
    name: str,
    version: str,
    sha256: str,
    source: IndexSource,
    *,
    index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
) -> tuple[str | Path, str]:
    """Where the wheel is (an https URL or a local file) and its file name."""
    from unearth import PackageFinder

    urls = [source.index_url] if source.index_url else list(index_urls)
    for url in urls:
        check_url(url, what="index URL")
    for location in find_links:
        if "://" in location and not location.startswith("file://"):
            check_url(location, what="find-links URL")
    try:
        finder = PackageFinder(index_urls=urls, find_links=find_links, ignore_compatibility=True)
        packages = list(
            finder.find_all_packages(name, allow_yanked=True, hashes={"sha256": [sha256]})
        )
    except _search_errors() as exc:
        raise _unreachable(f"{name}=={version}", urls, exc) from None
    best: Any = None
    for package in packages:
        link = package.link
        if not _matches(package, link, version, source.filename):
            continue
        published = (link.hashes or {}).get("sha256")
        if published is not None and published.lower() != sha256:
            continue
        if published is not None:
            best = link
            break
        best = best or link
    if best is None:
        where = ", ".join(redact_url(u) for u in urls) or "the default index"
        if find_links:
            where += " and " + ", ".join(_shown(link) for link in find_links)
        wanted = source.filename or f"{name}=={version}"
        raise FetchError(
            f"{wanted} with sha256 {sha256} not found on {where}",
            hint="check native.version, native.source.filename and the index URL "
            "(--index-url / --find-links)",
        )
    if best.is_file:
        return Path(os.fspath(best.file_path)), str(best.filename)
    url = str(best.url_without_fragment)
    check_url(url, what="wheel URL")
    return url, str(best.filename)


def _shown(location: str) -> str:
    """A find-links location as messages show it: a URL redacted, a directory as it is."""
    return redact_url(location) if "://" in location else location


def _search_errors() -> tuple[type[Exception], ...]:
    """What a search of an index raises when the index cannot be read: a socket or file error,
    a malformed answer, or the HTTP client's own errors (a refused connection, a timeout)."""
    import httpx2  # unearth's HTTP client: imported with unearth already

    return (OSError, ValueError, httpx2.HTTPError)


def _unreachable(wanted: str, urls: Sequence[str], exc: Exception) -> FetchError:
    from kvenv.lock.pages import without_urls  # URLs redacted: credentials never reach a message

    where = ", ".join(redact_url(u) for u in urls) or "the default index"
    return FetchError(
        f"cannot search {where} for {wanted}: {type(exc).__name__}: {without_urls(str(exc))}",
        hint="check the network and the index URL (--index-url, PIP_INDEX_URL); with no "
        "network, install from a bundle made on a connected machine with "
        "`{kvenv bundle -o kvenv-bundle}`: `{kvenv apply --offline --from kvenv-bundle}`",
    )


def _matches(package: Any, link: Any, version: str, filename: str | None) -> bool:
    if not str(link.filename).endswith(".whl"):
        return False
    if filename is not None and link.filename != filename:
        return False
    try:
        return package.version is not None and Version(package.version) == Version(version)
    except InvalidVersion:
        return False
