"""Probing the host: what ``kvenv fingerprint`` records and what ``plan``/``doctor`` check.

:func:`take_snapshot` returns a :class:`kvenv.model.snapshot.HostSnapshot` of this machine as
seen by one Python interpreter: by default the one running kvenv; with ``python=`` another one
(for example the system Python when kvenv lives in its own venv), probed by running a small
stdlib-only script in it (``python -I -c ...``, JSON out). Torch is read from its metadata and
``torch/version.py``, never imported, unless ``import_torch`` asks for the facts only an import
gives (then in a child process). :func:`list_gpus` lists the GPUs CUDA programs will see.

Every read of the machine goes through :class:`kvenv.probe.effects.Effects`; a missing tool or
file is recorded as a note ("no NVIDIA driver ..."), never raised. No environment variable is
recorded, and values of secret-looking variables are masked wherever they might appear
(:mod:`kvenv._util.redact`).
"""

from __future__ import annotations

import datetime
import json
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from kvenv._util import redact
from kvenv.model.snapshot import (
    GpuInfo,
    HostSnapshot,
    snapshot_from_dict,
    snapshot_to_dict,
)
from kvenv.probe import cpu, cuda, dists, kaggle, libs, nvidia, pyinfo, system, torchinfo
from kvenv.probe.effects import Effects, live
from kvenv.probe.pyinfo import Interpreter

__all__ = ["build_snapshot", "list_gpus", "take_snapshot", "watch_probe"]


def list_gpus(*, effects: Effects | None = None) -> list[GpuInfo]:
    """The GPUs CUDA programs started now would see (``CUDA_VISIBLE_DEVICES`` applied), in
    their CUDA order; empty when there is no driver or no GPU."""
    return list(nvidia.probe_gpus(effects or live()).gpus)


def take_snapshot(
    *,
    import_torch: bool = False,
    sys_path: list[str] | None = None,
    python: str | None = None,
    effects: Effects | None = None,
    memo: Path | None = None,
) -> HostSnapshot:
    """A snapshot of this host as ``python`` (default: this interpreter) sees it.

    ``sys_path`` replaces the interpreter's import path for finding distributions (and for
    ``import_torch``). Raises :class:`kvenv.errors.InputError` only when ``python`` cannot be
    run or does not answer as a Python interpreter; everything else missing is a note.
    ``memo``: a directory where another interpreter's own facts are kept while its files are
    unchanged (see :func:`kvenv.probe.pyinfo.remote_interpreter`; only with effects that read
    the live machine); its distributions, torch, GPUs and system are probed afresh every time.
    """
    fx = effects or live()
    if python is None:
        interp = pyinfo.local_interpreter()
        notes: list[str] = []
    else:
        interp = pyinfo.remote_interpreter(python, fx, memo=memo)
        notes = [
            f"probed {interp.executable} in isolated mode (-I): PYTHONPATH and the user's "
            "site-packages are not part of the host"
        ]
        if interp.sysconfig_platform != sysconfig.get_platform():
            notes.append(
                f"wheel platform tags are this machine's ({sysconfig.get_platform()}); the "
                f"probed interpreter reports {interp.sysconfig_platform}"
            )
    path = list(sys_path) if sys_path is not None else list(interp.sys_path)
    return build_snapshot(
        interp,
        path,
        fx,
        platforms=pyinfo.machine_platforms(),
        import_torch=import_torch,
        notes=notes,
        now=datetime.datetime.now(datetime.timezone.utc),
    )


def build_snapshot(
    interp: Interpreter,
    sys_path: Sequence[str],
    effects: Effects,
    *,
    platforms: list[str],
    import_torch: bool = False,
    notes: Sequence[str] = (),
    now: datetime.datetime | None = None,
) -> HostSnapshot:
    """Assemble a snapshot from an interpreter's facts and the host behind ``effects``."""
    all_notes = list(notes)
    python = pyinfo.python_info(interp, platforms)
    if sys_path != list(interp.sys_path):
        python = attrs.evolve(python, sys_path=list(sys_path))
    found, more = dists.read_distributions(sys_path)
    all_notes += more
    torch = None
    torch_dist = next((d for d in found if d.name.lower() == "torch"), None)
    if torch_dist is not None:
        torch, more = torchinfo.torch_from_metadata(torch_dist)
        all_notes += more
    if import_torch:
        torch, more = torchinfo.import_torch(torch, interp.executable, sys_path, effects)
        all_notes += more
    gpus = nvidia.probe_gpus(effects)
    all_notes += gpus.notes
    cpu_info = cpu.probe_cpu(effects, machine=interp.machine)
    snapshot = HostSnapshot(
        schema=1,
        python=python,
        platform=system.probe_platform(
            effects, sys_platform=interp.sys_platform, machine=interp.machine
        ),
        distributions=found,
        torch=torch,
        driver=gpus.driver,
        gpus=list(gpus.gpus),
        cuda=cuda.probe_cuda(effects),
        cpu=cpu_info,
        libraries=libs.probe_libraries(effects, found),
        is_kaggle=kaggle.is_kaggle(effects),
        taken_at=now.isoformat(timespec="seconds") if now else None,
        source="probe",
        notes=all_notes,
    )
    secrets = redact.secret_values(effects.environ)
    if not secrets:
        return snapshot
    data = snapshot_to_dict(snapshot)
    text = json.dumps(data)
    if not any(secret in text for secret in secrets):
        return snapshot
    return snapshot_from_dict(redact.scrub(data, secrets), file="<probe>")


def watch_probe(python: str | None, memo: Path | None = None) -> tuple[HostSnapshot, Any]:
    """Probe the host as :func:`take_snapshot` does (``python`` None: kvenv's own interpreter,
    in process; ``memo``: the memo root, where another interpreter's facts are kept) and
    return the snapshot with its identity, the reads :func:`kvenv.probe.hostmemo.host_unchanged`
    replays (None when it has none: an interpreter that is a script, or one that changed while
    it was probed)."""
    from kvenv.probe import hostmemo

    if python is None:
        from kvenv.probe import child

        own: Any = child.facts()["sys_path"]
        known: list[str] | None = list(own)
    else:
        known = pyinfo.remembered_sys_path(python, memo)
    before = hostmemo.interpreter_reads(python, known or [])
    reads: list[Any] = []
    snapshot = take_snapshot(python=python, memo=memo, effects=hostmemo.watched(live(), reads))
    sys_path = list(snapshot.python.sys_path)
    identity = hostmemo.interpreter_reads(python, sys_path)
    if before is None or identity != before:
        return snapshot, None  # changed while probed (or no identity): nothing to keep
    return snapshot, {"python": python, "sys_path": sys_path, "reads": [*identity, *reads]}
