"""Option values checked as the command line is parsed, before any command runs (so a bad
value is refused on the fast paths and the full path alike, before anything is claimed or
written): ``--jobs`` (a bounded count), ``--keep`` (generations kept), counts of at least 1
and paths (never empty).
Each raises :class:`argparse.ArgumentTypeError`, which the parser reports as bad input (exit 2)
naming the option."""

from __future__ import annotations

import argparse

MAX_JOBS = 256  # more threads than any machine kvenv meets usefully runs downloads with


def _whole(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_value(text: str) -> int:
    """A whole number of at least 1 (``verify-gpus --tensor-parallel-size N``)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def jobs_value(text: str) -> int:
    """``--jobs N``: a whole number from 1 to :data:`MAX_JOBS`."""
    value = _whole(text)
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(
            f"must be from 1 to {MAX_JOBS}, not {value} (parallel downloads and unpacks)"
        )
    return value


def keep_value(text: str) -> int:
    """``--keep N``: generations an apply keeps, at least
    :data:`kvenv.env.keep.MIN_KEEP` (the new one and the one it replaced)."""
    from kvenv.env.keep import MIN_KEEP  # only when --keep is given

    value = _whole(text)
    if value < MIN_KEEP:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_KEEP}, not {value} (the new generation and the one an "
            "apply switches away from are always kept)"
        )
    return value


def path_value(text: str) -> str:
    """A path option: never empty (an empty path names no directory; leaving the option out
    chooses the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty path is refused: give a path, or leave the option out"
        )
    return text


def place_options(p: argparse.ArgumentParser) -> None:
    """``--root`` and ``--cache``, as every command that acts on an applied root takes them."""
    p.add_argument(
        "--root",
        type=path_value,
        metavar="DIR",
        help="runtime root (default: $KVENV_ROOT, [paths])",
    )
    p.add_argument(
        "--cache", type=path_value, metavar="DIR", help="cache (default: $KVENV_CACHE_DIR, [paths])"
    )
