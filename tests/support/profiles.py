"""Parsing one profile document from text, for tests: no ``extends``, no discovery, the same
checks as :func:`kvenv.model.loading.load_profile` applies to a file."""

from __future__ import annotations

from kvenv._util import tomlio
from kvenv.errors import InputError, ProfileError
from kvenv.model import convert
from kvenv.model.loading import check_profile
from kvenv.model.profile import Profile


def loads_profile(text: str, *, file: str = "<text>") -> Profile:
    """Parse a single profile document (no ``extends`` resolution, no discovery)."""
    raw = tomlio.loads(text, file=file)
    try:
        profile = convert.structure(raw, Profile, file=file, what="profile")
    except InputError as exc:
        raise ProfileError(exc.message, problems=exc.problems) from None
    problems = check_profile(profile, file=file)
    if problems:
        raise ProfileError(f"invalid profile: {file}", problems=problems)
    return profile
