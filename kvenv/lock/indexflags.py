"""Which indexes and find-links a lock reads: ``kvenv lock``'s flags combined with the index
environment variables of pip and uv (never their config files), as plain values.

Precedence for the main index: ``--index-url``, then ``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``,
``PIP_INDEX_URL``; with none, unearth's default index. Extra indexes add up from
``--extra-index-url``, ``UV_INDEX``, ``UV_EXTRA_INDEX_URL`` and ``PIP_EXTRA_INDEX_URL``;
find-links from ``--find-links``, ``UV_FIND_LINKS`` and ``PIP_FIND_LINKS``.

This is the one place the rule lives: :func:`kvenv.lock.sources.index_config` builds its
record from :func:`index_values`, and an unchanged offline lock (:mod:`kvenv.lock.quick`)
keys its memo with the same values without importing the model classes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
EXTRA_INDEX_ENV = ("UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL")
FIND_LINKS_ENV = ("UV_FIND_LINKS", "PIP_FIND_LINKS")


def unique(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, in their first order."""
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


def index_values(
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    no_index: bool = False,
    environ: Mapping[str, str] | None = None,
    base: Path | None = None,
) -> tuple[str | None, tuple[str, ...], tuple[str, ...], bool]:
    """(main index, extra indexes, find-links, no-index) from flags and environment variables
    (``environ``: ``{}`` to ignore them); index URLs end in ``/``, local find-links are
    absolute."""
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
    return (
        main.rstrip("/") + "/" if main else None,
        tuple(unique(u.rstrip("/") + "/" for u in extras)),
        tuple(unique(resolved_links)),
        no_index,
    )


def _absolute(link: str, base: Path | None) -> str:
    if "://" in link:
        return link
    path = Path(link).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return str(path.resolve())
