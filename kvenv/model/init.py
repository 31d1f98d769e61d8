"""``kvenv init``: a starter profile, commented for a team repository, optionally describing a
live host (its ``[target]`` filled from a snapshot that is saved beside it).

:func:`render_profile` is the text (pure); :func:`init_profile` is the transaction: check the
name and that nothing would be overwritten, validate the text by loading it, then write the
snapshot and the profile, each created exclusively so an existing file is never replaced.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import atomic, tomlio
from kvenv.errors import InputError, ProfileError, UsageError
from kvenv.model.fields import ProfileName, check
from kvenv.model.loading import SCHEMA_LINE, find_profile, load_profile
from kvenv.model.profile import DEFAULT_PROTECTED
from kvenv.model.snapshot import HostSnapshot, write_snapshot
from kvenv.model.target import target_from_host

# The project-relative file the profile's ``#:schema ../schemas/...`` line (it sits in
# ``profiles/``) points at.
SCHEMA_FILE = SCHEMA_LINE.split(" ", 1)[1].removeprefix("../")
_DOTTED = re.compile(r"\d+(?:\.\d+)*")
_PYTHON = re.compile(r"3\.\d+(?:\.\d+)?")

NATIVE_EXAMPLE = """\
# The pinned native wheel (immutable source + sha256). With `extends`, the parent's is used.
# [native]
# name = "vllm"
# version = "0.18.2"
# sha256 = "<64 hex>"
# [native.source]
# kind = "hf"                      # or "url", "path", "index"
# repo = "owner/name"
# revision = "<40-hex commit>"
# filename = "vllm-0.18.2-cp312-cp312-linux_x86_64.whl"
"""

TARGET_EXAMPLE = """\
# The machine the overlay is for: `kvenv lock` resolves for it, `kvenv doctor` checks it.
# (`kvenv init NAME --from-host` fills this from the machine you run it on.)
# [target]
# python = "3.12.13"
# abi = "cp312"
# os = "linux"
# machine = "x86_64"
# glibc = "2.35"
# driver_min = "580.159.04"
# cuda = "12.8"
# [target.gpu]
# model = "Tesla T4"
# count = 2
# compute_capability = "7.5"
# memory_mib = 15360
"""


def _dotted(value: str | None) -> str | None:
    match = _DOTTED.match(value or "")
    return match.group(0) if match else None


def target_table(host: HostSnapshot) -> tuple[dict[str, Any], list[str]]:
    """A ``[target]`` table describing ``host`` (:func:`~kvenv.model.target.target_from_host`,
    with its GPUs, driver and CUDA), and notes on what could not be described."""
    notes: list[str] = []
    base = target_from_host(host)
    target: dict[str, Any] = {}
    version = _PYTHON.match(base.python)
    if version:
        target["python"] = version.group(0)
    target["implementation"] = base.implementation
    target["abi"] = str(base.abi)
    target["os"] = base.os
    target["machine"] = str(base.machine)
    glibc = _dotted(base.glibc)
    if glibc:
        target["glibc"] = glibc
    driver = _dotted(host.driver.version if host.driver else None)
    if driver:
        target["driver_min"] = driver
    cuda = _dotted(host.torch.cuda if host.torch else None)
    if cuda:
        target["cuda"] = cuda
    if host.gpus:
        first = host.gpus[0]
        gpu: dict[str, Any] = {"model": first.name, "count": len(host.gpus)}
        if first.compute_capability:
            gpu["compute_capability"] = first.compute_capability
        memories = [g.memory_mib for g in host.gpus if g.memory_mib]
        if memories:
            gpu["memory_mib"] = min(memories)
        if len({g.name for g in host.gpus}) > 1:
            notes.append("the GPUs differ; [target.gpu] describes the first")
        target["gpu"] = gpu
    else:
        notes.append("this host has no visible GPU: [target.gpu] is not described")
    if not driver:
        notes.append("no NVIDIA driver found: driver_min is not set")
    if not cuda:
        notes.append("no CUDA torch found: cuda is not set")
    return target, notes


def _table(name: str, data: dict[str, Any]) -> str:
    return tomlio.dumps({name: data}).strip() + "\n"


def render_profile(
    name: str,
    *,
    extends: str | None = None,
    host: HostSnapshot | None = None,
    snapshot: str | None = None,
    today: str = "",
    schema_line: bool = True,
    python: str | None = None,
) -> str:
    """The commented TOML of a new profile. ``host`` fills ``[target]``; ``snapshot`` is the
    project-relative path of its saved snapshot; ``schema_line``: the first line points editors
    at the JSON Schema (only true when the schema file is where the line points); ``python``:
    the host interpreter recorded as ``[host] python`` (what ``verify`` and ``apply`` judge)."""
    head = [SCHEMA_LINE] if schema_line else []
    head.append(f"# Profile {name!r}, started with `kvenv init`{f' on {today}' if today else ''}.")
    head.append(
        f"# Check it: kvenv validate {name}    Check a host against it: kvenv doctor {name}"
    )
    if schema_line:
        head.append(
            "# Field reference: docs/profiles.md (editors validate it via the #:schema line)."
        )
    else:
        head += [
            "# Field reference: docs/profiles.md. For editor validation, write the schema with",
            f"# `kvenv schema profile > {SCHEMA_FILE}` and put `{SCHEMA_LINE}` first.",
        ]
    head += [
        "schema = 1",
        f"name = {_quote(name)}",
    ]
    description = "describe the machine and stack this profile is for"
    if host is not None:
        description = _describe(host)
    head.append(f"description = {_quote(description)}")
    if extends:
        head.append(f"# Everything not set here comes from {extends!r}; tables merge key by key.")
        head.append(f"extends = {_quote(extends)}")
    parts = ["\n".join(head) + "\n"]
    if host is not None:
        target, notes = target_table(host)
        comment = "# The machine the overlay is for, described from the live host"
        when = f" ({host.taken_at})" if host.taken_at else ""
        lines = [comment + when + "."]
        lines += [f"# note: {n}" for n in notes]
        parts.append("\n".join(lines) + "\n" + _table("target", target))
        gpus = len(host.gpus)
        if gpus:
            parts.append(
                "# Use every visible GPU for tensor parallelism (lower it to use fewer).\n"
                + _table("runtime", {"tensor_parallel_size": gpus})
            )
    elif not extends:
        parts.append(TARGET_EXAMPLE)
    host_table: dict[str, Any] = {}
    if snapshot:
        host_table["snapshot"] = snapshot
    if python:
        host_table["python"] = python
    if not extends:
        host_table["protected"] = list(DEFAULT_PROTECTED)
    host_comment = (
        "# What the host provides: `snapshot` is the JSON `kvenv fingerprint --save` wrote on "
        "it;\n# `protected` packages are never installed, upgraded or shadowed."
    )
    if python:
        host_comment += (
            "\n# `python` is the host interpreter every command probes and judges (a relative "
            "path is\n# against this project)."
        )
    if host_table:
        parts.append(host_comment + "\n" + _table("host", host_table))
    else:
        parts.append(
            host_comment
            + '\n# [host]\n# snapshot = "profiles/'
            + name
            + '.host.json"   # from `kvenv fingerprint --save` on the host\n'
        )
    if not extends:
        parts.append(NATIVE_EXAMPLE)
    return "\n".join(parts)


def _describe(host: HostSnapshot) -> str:
    bits = []
    if host.gpus:
        bits.append(f"{len(host.gpus)} x {host.gpus[0].name}")
    bits.append(f"Python {host.python.version}")
    if host.torch and host.torch.version:
        bits.append(f"torch {host.torch.version}")
    if host.is_kaggle:
        bits.insert(0, "Kaggle")
    return ", ".join(bits)


def _quote(text: str) -> str:
    return tomlio.dumps({"v": text}).partition("=")[2].strip()


@attrs.frozen
class InitResult:
    """What :func:`init_profile` wrote (``schema_line``: whether the profile's first line
    points at the JSON Schema, written only when the schema file is there)."""

    profile: Path
    snapshot: Path | None = None
    schema_line: bool = False


def init_profile(
    name: str,
    project: Path,
    *,
    extends: str | None = None,
    host: Callable[[], HostSnapshot] | None = None,
    today: str = "",
    python: str | None = None,
) -> InitResult:
    """Write ``profiles/NAME.toml`` under ``project`` (and, given ``host``, the snapshot it
    returns as ``profiles/NAME.host.json``), never overwriting. ``host`` is called only once
    every check has passed. ``python`` (the absolute path of the interpreter ``host`` probes)
    is recorded as ``[host] python``: relative to ``project`` when it lies inside it (a
    project's own venv), else absolute. Raises :class:`UsageError` for a bad name,
    :class:`InputError` for a missing project or an existing file, :class:`ProfileError` when
    ``extends`` is not found or the generated profile would not load (then nothing is written)."""
    reason = check(ProfileName, name)
    if reason:
        raise UsageError(f"invalid profile name: {reason}")
    if not project.is_dir():
        raise InputError(f"project directory not found: {project}")
    directory = project / "profiles"
    path = directory / f"{name}.toml"
    snap_rel = f"profiles/{name}.host.json"
    snap_path = project / snap_rel
    for existing in (path, snap_path) if host is not None else (path,):
        if existing.exists():
            raise InputError(
                f"refusing to overwrite {existing}",
                hint="kvenv init never overwrites; pick another NAME or remove the file",
            )
    if extends:
        find_profile(extends, cwd=project)
    snap = host() if host is not None else None
    schema_here = (project / SCHEMA_FILE).is_file()  # where the line, in profiles/, points
    text = render_profile(
        name,
        extends=extends,
        host=snap,
        snapshot=snap_rel if snap is not None else None,
        today=today,
        schema_line=schema_here,
        python=recorded_python(python, project) if python else None,
    )
    directory.mkdir(parents=True, exist_ok=True)
    _check_loads(text, directory / f".{name}.{os.getpid()}.init.toml", project)
    if snap is not None:
        try:
            write_snapshot(snap_path, snap, exclusive=True)
        except FileExistsError:
            raise InputError(f"refusing to overwrite {snap_path}") from None
    try:
        atomic.write_text(path, text, exclusive=True)
    except BaseException as exc:
        if snap is not None:
            snap_path.unlink(missing_ok=True)  # never a snapshot without its profile
        if isinstance(exc, FileExistsError):
            raise InputError(f"refusing to overwrite {path}") from None
        raise
    return InitResult(path, snap_path if snap is not None else None, schema_here)


def recorded_python(python: str, project: Path) -> str:
    """How ``[host] python`` records the interpreter at ``python``: the path relative to
    ``project`` when it lies inside it, else absolute. Symbolic links are kept, never resolved
    (a virtual environment's ``bin/python`` is a link to the base interpreter, which is not the
    same host)."""
    absolute = Path(os.path.abspath(python))
    base = Path(os.path.abspath(project))
    if absolute.is_relative_to(base):
        return absolute.relative_to(base).as_posix()
    return str(absolute)


def _check_loads(text: str, scratch: Path, project: Path) -> None:
    """Load ``text`` as the profile it will be (from a scratch file beside it, removed after):
    a profile kvenv writes must load."""
    scratch.write_text(text, encoding="utf-8")
    try:
        load_profile(str(scratch.resolve()), cwd=project)
    except ProfileError as exc:
        raise ProfileError(
            f"the generated profile would not load: {exc.message}",
            problems=exc.problems,
            hint="report this; nothing was written",
        ) from None
    finally:
        scratch.unlink(missing_ok=True)
