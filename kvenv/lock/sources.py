"""Where candidate wheels come from: index URLs and find-links locations, from ``kvenv lock``
flags and the index environment variables of pip and uv (never from their config files).

Precedence for the main index: ``--index-url``, then ``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``,
``PIP_INDEX_URL``; with none, unearth's default index. Extra indexes add up from
``--extra-index-url``, ``UV_INDEX``, ``UV_EXTRA_INDEX_URL`` and ``PIP_EXTRA_INDEX_URL``;
find-links from ``--find-links``, ``UV_FIND_LINKS`` and ``PIP_FIND_LINKS``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
EXTRA_INDEX_ENV = ("UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL")
FIND_LINKS_ENV = ("UV_FIND_LINKS", "PIP_FIND_LINKS")


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
        return _unique([*urls, *self.extra_index_urls])


def _default_index() -> str:
    from unearth import PackageFinder

    return str(PackageFinder().sources[0]["url"])


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _split(value: str) -> list[str]:
    out = []
    for item in re.split(r"[\s,]+", value.strip()):
        if not item:
            continue
        name, sep, rest = item.partition("=")
        # uv's named index form: NAME=URL
        if sep and "://" in rest and "://" not in name:
            item = rest
        out.append(item)
    return out


def index_config(
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    no_index: bool = False,
    environ: Mapping[str, str] | None = None,
    base: Path | None = None,
) -> IndexConfig:
    """Combine flags and environment variables (``environ``: ``{}`` to ignore them)."""
    env = environ if environ is not None else {}
    main = index_url
    if main is None:
        for key in INDEX_ENV:
            values = _split(env.get(key, ""))
            if values:
                main = values[0]
                break
    extras = list(extra_index_urls)
    for key in EXTRA_INDEX_ENV:
        extras.extend(_split(env.get(key, "")))
    links = list(find_links)
    for key in FIND_LINKS_ENV:
        links.extend(_split(env.get(key, "")))
    resolved_links = [_absolute(link, base) for link in links]
    return IndexConfig(
        index_url=main.rstrip("/") + "/" if main else None,
        extra_index_urls=tuple(_unique(u.rstrip("/") + "/" for u in extras)),
        find_links=tuple(_unique(resolved_links)),
        no_index=no_index,
    )


def _absolute(link: str, base: Path | None) -> str:
    if "://" in link:
        return link
    path = Path(link).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return str(path.resolve())
