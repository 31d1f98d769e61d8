"""Running one command, or the user's shell, in an applied generation's environment
(``kvenv run``, ``kvenv shell``), and which shell ``kvenv activate`` writes for.

The environment is :func:`kvenv.env.activation.activated_environ` over this process's: exactly
what a shell that evaluated ``kvenv activate`` has. The command replaces kvenv's process
(``os.execvpe``): no shell parses its arguments, signals reach it directly, and its exit status
is the one its caller sees. Everything that can fail is checked before the exec, so a failure is
a kvenv error, never a half-started command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvenv.errors import InputError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the start-up path imports no ``typing``
    from collections.abc import Callable
    from typing import Any, NoReturn

    from kvenv.env.manifest import Activation
    from kvenv.env.shellrender import PlainActivation
    from kvenv.model.locations import Locations

# Process names and $SHELL basenames -> the shell kvenv activate writes for.
_SHELL_NAMES = {
    "bash": "bash",
    "zsh": "zsh",
    "fish": "fish",
    "pwsh": "pwsh",
    "pwsh-preview": "pwsh",
    "powershell": "pwsh",
    "sh": "sh",
    "dash": "sh",
    "ash": "sh",
    "ksh": "sh",
    "mksh": "sh",
    "busybox": "sh",
}
DEFAULT_SHELL = "/bin/sh"


def shell_of(name: str) -> str | None:
    """The shell kvenv writes for a process name or path (``/usr/bin/zsh``, ``-bash`` as a
    login shell shows itself); None for anything else."""
    base = os.path.basename(name.strip()).lstrip("-")
    base = base.removesuffix(".exe")
    return _SHELL_NAMES.get(base)


def parent_process_name(ppid: int | None = None) -> str | None:
    """The name of the parent process (``/proc/<ppid>/comm``); None where there is no
    ``/proc`` or it cannot be read."""
    pid = os.getppid() if ppid is None else ppid
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def detect_shell(environ: Mapping[str, str], parent: str | None) -> str:
    """The shell to write activation for when ``--shell`` is not given: the parent process
    when it is a shell (``eval "$(kvenv activate)"`` runs kvenv as the shell's child, so this
    is the shell evaluating the output, even when ``$SHELL`` names the login shell), else
    ``$SHELL``, else ``bash``."""
    for name in (parent, environ.get("SHELL")):
        found = shell_of(name) if name else None
        if found is not None:
            return found
    return "bash"


def chosen_shell(given: str | None, environ: Mapping[str, str]) -> str:
    """``--shell`` when given, else :func:`detect_shell` over this process's parent."""
    return given or detect_shell(environ, parent_process_name())


def applied_activation(
    locations: Locations | None,
    profile_name: str = "",
    manifest: str | None = None,
    on_success: list[Callable[[], None]] | None = None,
) -> tuple[Activation, Path]:
    """The activation of the current generation under ``locations`` (its root checked to be
    ``profile_name``'s, or of the manifest file ``manifest``), checked; and the manifest's
    path. An :class:`InputError` naming the fix when nothing is applied. ``on_success`` gets
    the memo record (kind ``activation``) :func:`quick_activation` answers from next time, to
    keep once the command succeeded: the value, with what this full path read (the marker,
    the pointer, the manifest's bytes, the dirs activation checks) as its dependencies."""
    from kvenv.env.activation import activation_for
    from kvenv.env.manifest import read_manifest
    from kvenv.env.root import check_manifest_file, current_manifest_path

    if manifest is not None or locations is None:
        if manifest is None:
            raise UsageError("no runtime root and no manifest to activate")
        path: Path | None = Path(manifest).absolute()  # children may run elsewhere
        assert path is not None
        check_manifest_file(path)
        return activation_for(read_manifest(path)), path
    from kvenv._util import memo
    from kvenv.env.root import RootOwner, check_owner

    root = locations.root
    with memo.recording() as reads:
        check_owner(root, RootOwner(profile_name))  # the marker, noted (the owner is a name)
        path = current_manifest_path(root)
        if path is None:
            raise InputError(
                f"nothing is applied for profile {profile_name} in {root}",
                hint="run `{kvenv apply}` first",
            )
        read = read_manifest(path, root=root)
        activation = activation_for(read)
    if on_success is not None:
        import attrs

        from kvenv.model.places import memo_root

        where = memo_root(locations.cache if locations.cache_from == "--cache" else None)
        key = [str(root), profile_name]
        value = {"activation": attrs.asdict(read.activation), "python": read.python}
        value["manifest"] = str(path)
        on_success.append(lambda: memo.put(where, "activation", key, reads.deps, value))
    return activation, path


def quick_activation(
    profile: str | None,
    *,
    root: str | None,
    cache: str | None,
    environ: Mapping[str, str],
) -> tuple[PlainActivation, Path] | None:
    """The activation of the current generation of ``profile``'s root, and its manifest's
    path, without the model (issue 13): the profile's facts (:mod:`kvenv.model.facts`), its
    places, and what :func:`applied_activation` recorded for that root and profile, kept
    while everything it read is unchanged (:mod:`kvenv._util.memo`, kind ``activation``).
    None when anything is not certain: then the caller takes the full path, which reports
    what is wrong. The host interpreter's directory is put on ``PATH`` afresh, as
    :func:`kvenv.env.activation.activation_for` does every time."""
    from kvenv.errors import KvenvError
    from kvenv.model.facts import cached_facts
    from kvenv.model.places import choose_places, memo_root

    try:  # an empty --cache or $KVENV_CACHE_DIR: the full path says so, after the profile
        facts = cached_facts(profile, cache=cache, environ=environ)
        if facts is None:
            return None
        root_path, _, _, _ = choose_places(
            facts.name,
            root=root,
            cache=cache,
            configured_root=facts.configured_root,
            configured_cache=facts.configured_cache,
            environ=environ,
        )
        where = memo_root(cache, environ)
    except (KvenvError, OSError):
        return None
    return recorded_activation(where, root_path, facts.name)


def recorded_activation(
    memo_root: Path, root: Path, profile_name: str
) -> tuple[PlainActivation, Path] | None:
    """What :func:`applied_activation` recorded under ``memo_root`` for ``root`` and the
    profile ``profile_name``, while everything it read is unchanged (None: the full path),
    its ``PATH`` completed with the host interpreter's directory afresh."""
    from kvenv._util import memo
    from kvenv.env.shellrender import PlainActivation, path_with_interpreter

    found: Any = memo.get(memo_root, "activation", [str(root), profile_name])
    try:
        activation = PlainActivation(found["activation"])
        activation.path = path_with_interpreter(activation.path, found["python"])
        return activation, Path(found["manifest"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # no record (or not one this kvenv writes)


def resolve_command(command: str, environ: Mapping[str, str]) -> str:
    """The executable ``command`` names, looked up on the ``PATH`` of ``environ`` (the
    activated one, so the generation's console scripts are found); a :class:`UsageError`
    when there is none."""
    if os.sep in command:
        if os.path.isfile(command) and os.access(command, os.X_OK):
            return command
        raise UsageError(
            f"command not found or not executable: {command}",
            hint="give an executable file, or a command on the activated PATH",
        )
    import shutil

    found = shutil.which(command, path=environ.get("PATH", os.defpath))
    if found is None:
        raise UsageError(
            f"command not found: {command} (not on the activated PATH)",
            hint="check the name: it is looked up on the PATH that `{kvenv activate}` sets "
            "(the generation's console scripts first)",
        )
    return found


PYTHON_NAMES = ("python", "python3")


def with_host_python(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """``argv`` with a bare ``python`` or ``python3`` first word replaced by the host interpreter
    the activated generation was built for (its manifest's, named by ``$KVENV_MANIFEST`` in
    ``environ``), so ``kvenv run P -- python`` is that interpreter even where activation could
    not put its directory on ``PATH`` (:func:`kvenv.env.shellrender.interpreter_dir`). The full
    path, not the bare name, becomes ``argv[0]``: CPython finds its prefix from it. Anything
    else, or no usable recorded interpreter, is left as it is."""
    out = list(argv)
    if not out or out[0] not in PYTHON_NAMES:
        return out
    import json

    try:
        with open(environ.get("KVENV_MANIFEST") or "", "rb") as stream:
            python = json.loads(stream.read()).get("python")
    except (OSError, ValueError, AttributeError):
        return out
    if isinstance(python, str) and os.path.isabs(python) and os.access(python, os.X_OK):
        out[0] = python
    return out


def user_shell(environ: Mapping[str, str]) -> str:
    """The shell ``kvenv shell`` starts: ``$SHELL`` when it names an executable, else
    ``/bin/sh``."""
    shell = environ.get("SHELL", "")
    if shell and os.path.isabs(shell) and os.access(shell, os.X_OK):
        return shell
    return DEFAULT_SHELL


def exec_command(
    argv: Sequence[str], environ: Mapping[str, str], on_exec: Sequence[Callable[[], None]] = ()
) -> NoReturn:
    """Replace this process with ``argv`` (its first word resolved with
    :func:`resolve_command`) in ``environ``. Never returns. ``on_exec`` runs once nothing can
    fail any more, just before the exec (kvenv's part succeeded: the records a successful
    command keeps)."""
    if not argv:
        raise UsageError(
            "no command given",
            hint="put the command after `--`: kvenv run [PROFILE] -- CMD [ARGS...]",
        )
    executable = resolve_command(argv[0], environ)
    for record in on_exec:
        record()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.execve(executable, list(argv), dict(environ))
