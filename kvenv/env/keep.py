"""How many generations an apply keeps: ``--keep N``, else ``$KVENV_KEEP_GENERATIONS``, else 2.

Its own module, with nothing but the standard library and :mod:`kvenv.errors`: ``kvenv apply``
checks the count before its recalled (fast) paths, which must not import the generations'
readers (:mod:`kvenv.env.generations`) and with them the model."""

from __future__ import annotations

from collections.abc import Mapping

from kvenv.errors import UsageError

KEEP_ENV = "KVENV_KEEP_GENERATIONS"
DEFAULT_KEEP = 2
MIN_KEEP = 2  # the new generation and the one current before it (processes may still use it)


def keep_count(flag: int | None, environ: Mapping[str, str]) -> int:
    """How many generations an apply keeps: ``--keep N``, else ``$KVENV_KEEP_GENERATIONS``,
    else 2. At least 2: the generation an apply switched away from is always kept, so that
    processes started from it keep importing from it until the next apply."""
    where = "--keep"
    value: object = flag
    if flag is None:
        text = environ.get(KEEP_ENV, "").strip()
        if not text:
            return DEFAULT_KEEP
        where = f"${KEEP_ENV}"
        try:
            value = int(text)
        except ValueError:
            value = text
    if not isinstance(value, int) or value < MIN_KEEP:
        raise UsageError(
            f"{where} must be a whole number of at least {MIN_KEEP}, not {value!r}",
            hint="the generation an apply switches away from is always kept (processes "
            f"started from it may still use it): give {MIN_KEEP} or more",
        )
    return value
