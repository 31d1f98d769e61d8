"""Activation as text for a shell, and as an environment: what ``kvenv activate`` prints, what
``kvenv run`` and ``kvenv shell`` run in, and the root's ``activate.*`` scripts.

Plain on purpose (``json``, ``os``, ``shlex``): the start-up path of ``kvenv activate`` renders
here without the model (issue 13). An activation is anything with the attributes of
:class:`kvenv.env.manifest.Activation` (:class:`ActivationView`): that record, or the plain
:class:`PlainActivation` the start-up path keeps of it (the memo kind ``activation``:
:func:`kvenv.env.runenv.quick_activation`), render the same text byte for byte. ``--shell
json`` prints the fields of :class:`kvenv.env.activation.ShellHook`
(``schemas/activation.schema.json``) in their order.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from kvenv.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the start-up path imports no ``typing``
    from typing import Any, Protocol

    class ActivationView(Protocol):
        """What rendering reads of an activation."""

        @property
        def pythonpath(self) -> Sequence[str]: ...
        @property
        def path(self) -> Sequence[str]: ...
        @property
        def ld_library_path(self) -> Sequence[str]: ...
        @property
        def env(self) -> Mapping[str, str]: ...
        @property
        def pth_imports(self) -> Sequence[str]: ...


class PlainActivation:
    """An activation as plain lists and a dict (the attributes of
    :class:`kvenv.env.manifest.Activation`), from its JSON."""

    __slots__ = ("env", "ld_library_path", "path", "pth_imports", "pythonpath", "site_dirs")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.pythonpath: list[str] = list(data.get("pythonpath", []))
        self.path: list[str] = list(data.get("path", []))
        self.ld_library_path: list[str] = list(data.get("ld_library_path", []))
        self.env: dict[str, str] = dict(data.get("env", {}))
        self.pth_imports: list[str] = list(data.get("pth_imports", []))
        self.site_dirs: list[str] = list(data.get("site_dirs", []))


SHELLS: tuple[str, ...] = ("bash", "zsh", "sh", "fish", "pwsh", "json")
SHIMS = {"sh": "bash", "fish": "fish", "ps1": "pwsh"}  # activate.<suffix> of a root: its shell
# What an activation records so that it can be undone: the names it set (space-separated) and,
# for each that was set before, its previous value (a name without one was unset before).
STATE_NAMES = "_KVENV_NAMES"
STATE_OLD = "_KVENV_OLD_"
DEACTIVATE = "kvenv_deactivate"


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _pwsh_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def interpreter_dir(python: str | None) -> str | None:
    """The directory of the host interpreter ``python`` (the one a generation's manifest
    records) when it offers ``python3`` as that same interpreter (a virtual environment's
    ``bin``, or ``/usr/bin`` for the system's): activation puts it on ``PATH`` right after the
    generation's ``bin``, so ``python``/``python3`` in ``kvenv run``, ``kvenv shell`` and an
    activated shell are the interpreter the generation was built for, whatever ``PATH`` held
    (as activating that environment would). None when no interpreter is recorded, or its
    directory offers no ``python3`` that is it."""
    if not python or not os.path.isabs(python):
        return None
    directory = os.path.dirname(python)
    candidate = os.path.join(directory, "python3")
    if os.path.realpath(candidate) != os.path.realpath(python):
        return None
    return directory if os.access(candidate, os.X_OK) else None


def path_with_interpreter(path: Sequence[str], python: str | None) -> list[str]:
    """An activation's ``PATH`` entries with the host interpreter's directory after them
    (:func:`interpreter_dir`), when it has one and it is not there already."""
    entries = list(path)
    found = interpreter_dir(python)
    if found is not None and found not in entries:
        entries.append(found)
    return entries


def _variables(activation: ActivationView) -> list[tuple[str, Sequence[str]]]:
    return [
        ("PYTHONPATH", activation.pythonpath),
        ("PATH", activation.path),
        ("LD_LIBRARY_PATH", activation.ld_library_path),
    ]


def activation_values(
    activation: ActivationView, environ: Mapping[str, str], *, manifest_path: str | None = None
) -> dict[str, str]:
    """The final value of every variable the activation sets, over ``environ`` (already
    deactivated): path entries prepended to the current value, the rest set. Ordered as the
    shells set them."""
    values: dict[str, str] = {}
    for name, entries in _variables(activation):
        if entries:
            current = environ.get(name, "")
            joined = os.pathsep.join(entries)
            values[name] = joined + (os.pathsep + current if current else "")
    values.update(activation.env)
    if manifest_path:
        values["KVENV_MANIFEST"] = manifest_path
    return values


def deactivated_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with a kvenv activation recorded in it undone (each name it set back to
    its previous value, or unset when it had none), as ``kvenv_deactivate`` does in a shell."""
    result = dict(environ)
    names = result.pop(STATE_NAMES, None)
    if names is None:
        return result
    for name in names.split():
        if not name.isidentifier():
            continue
        old = result.pop(STATE_OLD + name, None)
        if old is None:
            result.pop(name, None)
        else:
            result[name] = old
    return result


def activated_environ(
    activation: ActivationView, environ: Mapping[str, str], *, manifest_path: str | None = None
) -> dict[str, str]:
    """The whole environment after activating over ``environ``, exactly as a shell that
    evaluated ``kvenv activate`` has it: a previous activation undone first (so activating
    twice changes nothing), the previous values recorded for ``kvenv_deactivate``."""
    base = deactivated_environ(environ)
    values = activation_values(activation, base, manifest_path=manifest_path)
    result = dict(base)
    for name in values:
        result.pop(STATE_OLD + name, None)
        if name in base:
            result[STATE_OLD + name] = base[name]
    result.update(values)
    result[STATE_NAMES] = " ".join(values)
    return result


_POSIX_DEACTIVATE = """\
kvenv_deactivate() {
    if [ -n "${_KVENV_NAMES+x}" ]; then
        _kvenv_rest="$_KVENV_NAMES "
        while [ -n "$_kvenv_rest" ]; do
            _kvenv_name=${_kvenv_rest%% *}
            _kvenv_rest=${_kvenv_rest#* }
            case $_kvenv_name in
                '' | [0-9]* | *[!A-Za-z0-9_]*) continue ;;
            esac
            eval "_kvenv_had=\\${_KVENV_OLD_$_kvenv_name+x}"
            if [ -n "$_kvenv_had" ]; then
                eval "export $_kvenv_name=\\"\\$_KVENV_OLD_$_kvenv_name\\""
                unset "_KVENV_OLD_$_kvenv_name"
            else
                unset "$_kvenv_name"
            fi
        done
        unset _KVENV_NAMES _kvenv_rest _kvenv_name _kvenv_had
        hash -r 2>/dev/null || true
    fi
    if [ "${1-}" != nondestructive ]; then
        unset -f kvenv_deactivate
    fi
}
"""

_FISH_DEACTIVATE = """\
function kvenv_deactivate
    if set -q _KVENV_NAMES
        for _kvenv_name in (string split ' ' -- "$_KVENV_NAMES")
            string match -qr '^[A-Za-z_][A-Za-z0-9_]*$' -- "$_kvenv_name"; or continue
            set -l _kvenv_old _KVENV_OLD_$_kvenv_name
            if set -q $_kvenv_old
                set -gx $_kvenv_name $$_kvenv_old
                set -e -g $_kvenv_old
            else
                set -e -g $_kvenv_name
            end
        end
        set -e -g _KVENV_NAMES
    end
    if test "$argv[1]" != nondestructive
        functions -e kvenv_deactivate
    end
end
"""

_PWSH_DEACTIVATE = """\
function global:kvenv_deactivate([switch]$NonDestructive) {
    if (Test-Path env:_KVENV_NAMES) {
        foreach ($name in ($env:_KVENV_NAMES -split ' ')) {
            if ($name -notmatch '^[A-Za-z_][A-Za-z0-9_]*$') { continue }
            if (Test-Path "env:_KVENV_OLD_$name") {
                Set-Item -Path "env:$name" -Value (Get-Item -Path "env:_KVENV_OLD_$name").Value
                Remove-Item -Path "env:_KVENV_OLD_$name"
            } else {
                Remove-Item -Path "env:$name" -ErrorAction SilentlyContinue
            }
        }
        Remove-Item -Path env:_KVENV_NAMES
    }
    if (-not $NonDestructive) {
        Remove-Item -Path function:kvenv_deactivate -ErrorAction SilentlyContinue
    }
}
"""


def render_deactivate(shell: str) -> str:
    """The text that undoes a kvenv activation in ``shell`` (``kvenv activate --undo``):
    every variable it set back to its previous value, or unset when it had none."""
    if shell not in SHELLS or shell == "json":
        raise UsageError(
            f"cannot undo an activation for shell {shell!r}",
            hint=f"choose one of {', '.join(s for s in SHELLS if s != 'json')}",
        )
    if shell == "fish":
        return _FISH_DEACTIVATE + "kvenv_deactivate\n"
    if shell == "pwsh":
        return _PWSH_DEACTIVATE + "kvenv_deactivate\n"
    return _POSIX_DEACTIVATE + "kvenv_deactivate\n"


def render(
    activation: ActivationView,
    shell: str,
    *,
    manifest_path: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The activation as text for ``shell``: a previous kvenv activation undone, the previous
    values saved, the path variables prepended to, the rest set; and a ``kvenv_deactivate``
    function that restores the previous values. For ``json``, a :class:`ShellHook` whose final
    values are computed over ``environ`` (default: this process's environment)."""
    if shell not in SHELLS:
        raise UsageError(f"unknown shell {shell!r}", hint=f"choose one of {', '.join(SHELLS)}")
    extra = dict(activation.env)
    if manifest_path:
        extra["KVENV_MANIFEST"] = manifest_path
    if shell == "json":
        base = deactivated_environ(os.environ if environ is None else environ)
        hook = {  # kvenv.env.activation.ShellHook's fields, in its order
            "prepend": {name: list(entries) for name, entries in _variables(activation)},
            "set": extra,
            "pth_imports": list(activation.pth_imports),
            "environment_variables": activation_values(
                activation, base, manifest_path=manifest_path
            ),
        }
        return json.dumps(hook, indent=2) + "\n"
    names = [name for name, entries in _variables(activation) if entries] + list(extra)
    if shell == "fish":
        lines = [_FISH_DEACTIVATE.rstrip("\n"), "kvenv_deactivate nondestructive"]
        for name in names:
            lines.append(
                f"if set -q {name}; set -gx {STATE_OLD}{name} ${name}; "
                f"else; set -e -g {STATE_OLD}{name}; end"
            )
    elif shell == "pwsh":
        lines = [_PWSH_DEACTIVATE.rstrip("\n"), "kvenv_deactivate -NonDestructive"]
        for name in names:
            lines.append(
                f"if (Test-Path env:{name}) {{ $env:{STATE_OLD}{name} = $env:{name} }} "
                f"else {{ Remove-Item -Path env:{STATE_OLD}{name} -ErrorAction SilentlyContinue }}"
            )
    else:
        lines = [_POSIX_DEACTIVATE.rstrip("\n"), "kvenv_deactivate nondestructive"]
        for name in names:
            lines.append(
                f'if [ -n "${{{name}+x}}" ]; then export {STATE_OLD}{name}="${name}"; '
                f"else unset {STATE_OLD}{name}; fi"
            )
    for name, entries in _variables(activation):
        if not entries:
            continue
        joined = os.pathsep.join(entries)
        if shell == "fish":
            quoted = " ".join(_fish_quote(e) for e in entries)
            lines.append(  # an empty value adds no empty entry (as ${X:+:$X} in sh)
                f'if test -n "${name}"; set -gx {name} {quoted} ${name}; '
                f"else; set -gx {name} {quoted}; end"
            )
        elif shell == "pwsh":
            lines.append(
                f"$env:{name} = {_pwsh_quote(joined)} + "
                f"$(if ($env:{name}) {{ '{os.pathsep}' + $env:{name} }} else {{ '' }})"
            )
        else:
            lines.append(f'export {name}={shlex.quote(joined)}"${{{name}:+:${name}}}"')
    for name, value in extra.items():
        if shell == "fish":
            lines.append(f"set -gx {name} {_fish_quote(value)}")
        elif shell == "pwsh":
            lines.append(f"$env:{name} = {_pwsh_quote(value)}")
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    recorded = " ".join(names)
    if shell == "fish":
        lines.append(f"set -gx {STATE_NAMES} {_fish_quote(recorded)}")
    elif shell == "pwsh":
        lines.append(f"$env:{STATE_NAMES} = {_pwsh_quote(recorded)}")
    else:
        lines.append(f"export {STATE_NAMES}={shlex.quote(recorded)}")
        lines.append("hash -r 2>/dev/null || true")
    return "\n".join(lines) + "\n"


def shim_texts_for(root: Path, generation: str, activation: ActivationView) -> dict[Path, str]:
    """``<root>/activate.{sh,fish,ps1}`` and their text for ``generation`` of ``root`` whose
    activation is ``activation`` (the manifest's, its ``PATH`` completed by
    :func:`path_with_interpreter`)."""
    where = str(root / "generations" / generation / "manifest.json")
    texts: dict[Path, str] = {}
    for suffix, shell in SHIMS.items():
        text = f"# kvenv activation for generation {generation}; generated, do not edit\n"
        texts[root / f"activate.{suffix}"] = text + render(activation, shell, manifest_path=where)
    return texts
