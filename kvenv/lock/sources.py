"""Where candidate wheels come from: index URLs and find-links locations, from ``kvenv lock``
flags and the index environment variables of pip and uv (never from their config files), as
one record. The precedence rule itself is :mod:`kvenv.lock.indexflags`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from kvenv.lock.indexflags import EXTRA_INDEX_ENV, FIND_LINKS_ENV, INDEX_ENV, index_values, unique

__all__ = ["EXTRA_INDEX_ENV", "FIND_LINKS_ENV", "INDEX_ENV", "IndexConfig", "index_config"]


@attrs.frozen
class IndexConfig:
    """Index URLs (``None`` entries never appear; an empty main index means unearth's default)
    and find-links locations (directories or URLs of HTML pages)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False

    def index_urls(self) -> list[str]:
        if self.no_index:
            return []
        urls = [self.index_url] if self.index_url else [_default_index()]
        return unique([*urls, *self.extra_index_urls])


def _default_index() -> str:
    from unearth import PackageFinder

    return str(PackageFinder().sources[0]["url"])


def index_config(
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    no_index: bool = False,
    environ: Mapping[str, str] | None = None,
    base: Path | None = None,
) -> IndexConfig:
    """Combine flags and environment variables (``environ``: ``{}`` to ignore them), by the
    rule of :func:`kvenv.lock.indexflags.index_values`."""
    main, extras, links, no_index = index_values(
        index_url=index_url,
        extra_index_urls=extra_index_urls,
        find_links=find_links,
        no_index=no_index,
        environ=environ,
        base=base,
    )
    return IndexConfig(index_url=main, extra_index_urls=extras, find_links=links, no_index=no_index)
