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
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from kvenv.errors import InputError, UsageError

if TYPE_CHECKING:
    from kvenv.env.manifest import Activation
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
    locations: Locations | None, profile_name: str = "", manifest: str | None = None
) -> tuple[Activation, Path]:
    """The activation of the current generation under ``locations`` (or of the manifest file
    ``manifest``), checked; and the manifest's path. An :class:`InputError` naming the fix
    when nothing is applied."""
    from kvenv.env.activation import activation_for
    from kvenv.env.manifest import read_manifest
    from kvenv.env.root import check_manifest_file, current_manifest_path

    if manifest is not None or locations is None:
        if manifest is None:
            raise UsageError("no runtime root and no manifest to activate")
        path: Path | None = Path(manifest).absolute()  # children may run elsewhere
        assert path is not None
        check_manifest_file(path)
        root = None
    else:
        path = current_manifest_path(locations.root)
        root = locations.root
        if path is None:
            raise InputError(
                f"nothing is applied for profile {profile_name} in {locations.root}",
                hint="run `{kvenv apply}` first",
            )
    return activation_for(read_manifest(path, root=root)), path


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
    found = shutil.which(command, path=environ.get("PATH", os.defpath))
    if found is None:
        raise UsageError(
            f"command not found: {command} (not on the activated PATH)",
            hint="check the name: it is looked up on the PATH that `{kvenv activate}` sets "
            "(the generation's console scripts first)",
        )
    return found


def user_shell(environ: Mapping[str, str]) -> str:
    """The shell ``kvenv shell`` starts: ``$SHELL`` when it names an executable, else
    ``/bin/sh``."""
    shell = environ.get("SHELL", "")
    if shell and os.path.isabs(shell) and os.access(shell, os.X_OK):
        return shell
    return DEFAULT_SHELL


def exec_command(argv: Sequence[str], environ: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``argv`` (its first word resolved with
    :func:`resolve_command`) in ``environ``. Never returns."""
    if not argv:
        raise UsageError(
            "no command given",
            hint="put the command after `--`: kvenv run [PROFILE] -- CMD [ARGS...]",
        )
    executable = resolve_command(argv[0], environ)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.execve(executable, list(argv), dict(environ))
