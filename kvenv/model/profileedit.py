"""A profile file edited in place: comments, order and formatting kept (tomlkit), the result
checked by loading it before anything is written, written atomically, and put back as it was
when what follows the edit (the relock) fails. The one helper of every command that edits a
profile (``pin``, ``add``, ``remove``).

tomlkit is imported only here, so only the editing commands pay for it: a round trip through
``tomllib``/``tomli-w`` would drop every comment of a file a team keeps in its repository.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import atomic
from kvenv.errors import InputError, Problem, ProfileError
from kvenv.model.loading import LoadedProfile, load_profile

__all__ = ["ProfileEdit", "edit_profile", "editable_path"]


@attrs.frozen
class ProfileEdit:
    """What :func:`edit_profile` did: the file, its text before and after, and the profile
    as it loads now (``changed``: the bytes differ, so the file was written)."""

    path: Path
    before: str
    after: str
    loaded: LoadedProfile

    @property
    def changed(self) -> bool:
        return self.before != self.after


def editable_path(loaded: LoadedProfile, verb: str) -> Path:
    """The file a command may edit for ``loaded``: refused for a built-in profile (it ships
    inside kvenv) with the fix, a profile of one's own that extends it."""
    if loaded.origin == "builtin":
        name = loaded.profile.name
        raise InputError(
            f"{name} is a built-in profile (shipped with kvenv): `kvenv {verb}` edits only a "
            "profile file of your own",
            problems=[
                Problem(
                    "a built-in profile is read-only",
                    file=str(loaded.path),
                    path="$",
                    fix=f"start your own that extends it: kvenv init NAME --extends {name}, "
                    f"then `kvenv {verb} ... --profile NAME`",
                )
            ],
            hint=f"kvenv init NAME --extends {name}",
        )
    return loaded.path


@contextmanager
def edit_profile(
    path: Path, change: Callable[[Any], None], *, cwd: Path | None = None
) -> Iterator[ProfileEdit]:
    """Parse ``path`` with tomlkit, let ``change`` edit the document in place, check that the
    result loads as a profile (from a scratch file beside it; a :class:`ProfileError` naming
    the problems otherwise, with nothing written), write it atomically, and yield the
    :class:`ProfileEdit`. When the body of the ``with`` raises, the file is put back as it was
    (unless someone changed it meanwhile) and the error goes on."""
    import tomlkit
    import tomlkit.exceptions

    try:
        raw = path.read_bytes()  # put back byte for byte (line endings included) on failure
        before = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from None
    try:
        document = tomlkit.parse(before)
    except tomlkit.exceptions.ParseError as exc:
        raise ProfileError(
            f"cannot parse profile {path}: {exc}",
            problems=[Problem(str(exc), file=str(path), path="$", fix="fix the TOML syntax")],
        ) from None
    change(document)
    after = tomlkit.dumps(document)
    _check_loads(after, path, cwd)
    if after != before:
        atomic.write_text(path, after)
    try:
        yield ProfileEdit(path, before, after, load_profile(str(path), cwd=cwd))
    except BaseException:
        if after != before and _reads(path) == after:
            atomic.write_bytes(path, raw)
        raise


def _reads(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _check_loads(text: str, path: Path, cwd: Path | None) -> None:
    """Load ``text`` as the profile at ``path`` would load (a scratch file beside it, so
    ``extends`` and relative paths resolve the same; removed after)."""
    scratch = path.with_name(f".{path.stem}.{os.getpid()}.edit.toml")
    scratch.write_text(text, encoding="utf-8")
    try:
        load_profile(str(scratch.resolve()), cwd=cwd)
    except ProfileError as exc:
        problems = [
            p.replace(file=str(path)) if p.file == str(scratch.resolve()) else p
            for p in exc.problems
        ]
        message = exc.message.replace(str(scratch.resolve()), str(path))
        raise ProfileError(
            f"the edited profile would not load: {message}",
            problems=problems,
            hint=f"{path} was left as it was",
        ) from None
    finally:
        scratch.unlink(missing_ok=True)
