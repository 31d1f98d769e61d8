"""The one exception family of kvenv.

Every error kvenv raises on purpose derives from :class:`KvenvError`. Only the CLI
(``kvenv.cli``) turns them into exit codes and text; library code raises and returns.
"""

from __future__ import annotations

# ``typing`` and ``collections.abc`` only for the type checker: every command imports this
# module, ``kvenv activate`` among them (issue 13's start-up budgets).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

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


class Problem:
    """One thing wrong with one input: where (file and ``$.json.path``), what, and the fix.

    A plain immutable value class, not attrs: ``kvenv.errors`` is imported by every command,
    and attrs costs 20 ms to import (issue 13's start-up budgets)."""

    __slots__ = ("file", "fix", "message", "path")
    message: str
    file: str | None
    path: str | None
    fix: str | None

    def __init__(
        self,
        message: str,
        file: str | None = None,
        path: str | None = None,
        fix: str | None = None,
    ) -> None:
        for name, value in (("message", message), ("file", file), ("path", path), ("fix", fix)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Problem is immutable: cannot set {name!r}")

    def _key(self) -> tuple[str, str | None, str | None, str | None]:
        return (self.message, self.file, self.path, self.fix)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Problem) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Problem(message={self.message!r}, file={self.file!r}, path={self.path!r}, "
            f"fix={self.fix!r})"
        )

    def replace(self, **changes: str | None) -> Problem:
        """A copy with ``changes`` (the fields by name) applied."""
        fields = dict(message=self.message, file=self.file, path=self.path, fix=self.fix)
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Problem has no field {sorted(unknown)[0]!r}")
        fields.update(changes)
        message = fields.pop("message")
        assert message is not None
        return Problem(message, **fields)

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
            p.replace(fix=fill_commands(p.fix, complete)) if p.fix else p for p in problems
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


class KvenvWarning(UserWarning):
    """Root of every warning kvenv issues through :mod:`warnings` (library code never prints)."""


class NotAppliedWarning(KvenvWarning):
    """``kvenv.activate()`` found nothing applied for the profile: it changed nothing and
    returns False. The message names the profile, its root and the command that applies it."""


class AlreadyImportedWarning(KvenvWarning):
    """Activation found a module of the overlay already imported from other files, at another
    version: the process keeps the loaded copy and may mix the two."""
