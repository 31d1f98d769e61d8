"""The one exception family of kvenv.

Every error kvenv raises on purpose derives from :class:`KvenvError`. Only the CLI
(``kvenv.cli``) turns them into exit codes and text; library code raises and returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

_E = TypeVar("_E", bound="KvenvError")


def _plain_command(words: Sequence[str]) -> str:
    return " ".join(("kvenv", *words))


def fill_commands(text: str, complete: Callable[[Sequence[str]], str] = _plain_command) -> str:
    """``text`` with each ``{kvenv VERB ARGS}`` replaced by ``complete(("VERB", "ARGS"...))``:
    how a hint names a kvenv command for the profile and root at hand (see
    :meth:`KvenvError.complete_commands`)."""
    if "{kvenv " not in text:
        return text
    import re

    return re.sub(r"\{kvenv ([^{}]+)\}", lambda m: complete(m.group(1).split()), text)


@attrs.frozen
class Problem:
    """One thing wrong with one input: where (file and ``$.json.path``), what, and the fix."""

    message: str
    file: str | None = None
    path: str | None = None
    fix: str | None = None

    def render(self) -> str:
        where = ""
        if self.file and self.path:
            where = f"{self.file}: {self.path}: "
        elif self.file:
            where = f"{self.file}: "
        elif self.path:
            where = f"{self.path}: "
        text = f"{where}{self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text

    def to_json(self) -> dict[str, str | None]:
        return {"file": self.file, "path": self.path, "message": self.message, "fix": self.fix}


class KvenvError(Exception):
    """Root of every error kvenv raises on purpose. Exit code 2 unless a subclass says else."""

    def __init__(self, message: str, *, problems: Sequence[Problem] = (), hint: str | None = None):
        super().__init__(message)
        self.message = message
        self._templates = (tuple(problems), hint)
        self.problems: tuple[Problem, ...] = ()
        self.hint: str | None = None
        self.complete_commands(_plain_command)

    def complete_commands(self, complete: Callable[[Sequence[str]], str]) -> None:
        """Write every ``{kvenv VERB ARGS}`` of the hint and the problems' fixes as
        ``complete(("VERB", "ARGS"...))``: the CLI completes them with the invocation's profile,
        paths and interpreter, so a fix prints as a command that can be run as it is. Unbound
        (library use), they read ``kvenv VERB ARGS``."""
        problems, hint = self._templates
        self.problems = tuple(
            attrs.evolve(p, fix=fill_commands(p.fix, complete)) if p.fix else p for p in problems
        )
        self.hint = fill_commands(hint, complete) if hint else hint

    def recast(self, cls: type[_E]) -> _E:
        """The same error (message, problems, hint, unfilled commands) as a ``cls``."""
        problems, hint = self._templates
        return cls(self.message, problems=problems, hint=hint)

    def render(self) -> str:
        lines = [self.message]
        lines.extend(f"  - {p.render()}" for p in self.problems)
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


class UsageError(KvenvError):
    """A command line that cannot be acted on."""


class InputError(KvenvError):
    """A file or value given to kvenv is malformed (profile, lock, snapshot, manifest, path)."""


class ProfileError(InputError):
    """A profile cannot be read, parsed, validated or found."""


class ProfileNotReadable(ProfileError):
    """A profile file (or a parent in its ``extends`` chain) is missing or is not TOML at all,
    as opposed to a readable profile whose content is invalid."""


class LockError(InputError):
    """A pylock file is malformed or cannot be used."""


class IntegrityError(KvenvError):
    """An artifact does not match its pinned sha256 or size, or a wheel is unsafe."""


class FetchError(KvenvError):
    """An artifact could not be downloaded or found."""


class TransientFetchError(FetchError):
    """A failure worth one more try (connection reset, timeout, 5xx, short read)."""


class Cancelled(FetchError):
    """Stopped on purpose (another download of the same run failed, or an interrupt)."""


class InstallError(KvenvError):
    """Installing into a generation failed; the previous state is untouched."""


class ConflictError(KvenvError):
    """The request is impossible as stated: resolution conflict, protected package, busy lock."""


class CheckFailed(KvenvError):
    """A check ran and did not pass (exit 1): invalid profile, stale lock, drift, doctor."""


class RuntimeNotReady(KvenvError):
    """vLLM is not importable and no applied runtime could be activated."""


class ShardError(InputError):
    """A sharded-state checkpoint is malformed or does not match the requested topology."""
