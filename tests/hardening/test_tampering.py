"""The tampering matrix: {generation file, store file, cached wheel, manifest, pointer} x
{edit, truncate, delete, chmod}. For each: ``verify`` fails naming the damaged file (or, where
the environment is not damaged, passes: see ``NOT_DAMAGE``), ``apply --repair`` restores a
state that ``verify`` passes, and nothing outside kvenv's directories changes. (The state files,
manifest and pointer, are checked as ``kvenv verify`` checks them first: :func:`state_damage`.)

Not damage, on purpose: a cached wheel deleted (a cache may be emptied: ``kvenv cache clean``)
or made unreadable by a mode change (the applied generation does not read it; the next apply
that needs it re-verifies it). Modes are seen through the store's seal, so a ``chmod`` of a
generation file (the same inode as the store's) is damage.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from kvenv.env.integrity import state_damage
from kvenv.env.manifest import Manifest
from kvenv.env.root import current_state
from kvenv.env.verify import verify
from kvenv.fetch.cache import ArtifactCache
from kvenv.model.locations import Locations
from kvenv.model.snapshot import HostSnapshot
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    standard_project,
)

TARGETS = ("generation", "store", "cache", "manifest", "pointer")
OPERATIONS = ("edit", "truncate", "delete", "chmod")
NOT_DAMAGE = {("cache", "delete"), ("cache", "chmod")}


def _applied(tmp_path: Path) -> tuple[Project, Locations, HostSnapshot, Manifest]:
    project = standard_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    where = locations(tmp_path)
    apply(project.loaded(), project.lock(), host, where, jobs=2)
    manifest = current_state(where)[1]
    assert manifest is not None
    return project, where, host, manifest


def _target(kind: str, where: Locations, manifest: Manifest) -> Path:
    helper = next(d for d in manifest.distributions if d.name == "helper")
    if kind == "generation":
        return Path(manifest.dirs.overlay) / "helper" / "__init__.py"
    if kind == "store":
        return where.store / helper.wheel_sha256 / "site" / "helper" / "__init__.py"
    if kind == "manifest":
        return where.generations / manifest.generation / "manifest.json"
    if kind == "pointer":
        return where.root / "current.json"
    entry = ArtifactCache(where.cache).entry(helper.wheel_sha256)
    return next(p for p in entry.iterdir() if p.suffix == ".whl")


def _tamper(path: Path, operation: str) -> None:
    os.chmod(path.parent, stat.S_IMODE(path.parent.stat().st_mode) | stat.S_IWUSR)
    if operation == "chmod":
        os.chmod(path, 0)
        return
    if operation == "delete":
        path.unlink()
        return
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    if operation == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))


def _outside(tmp_path: Path, where: Locations) -> dict[str, str]:
    """A digest of every file outside the root and the cache (the project, the host site)."""
    out: dict[str, str] = {}
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and not any(
            path.is_relative_to(base) for base in (where.root, where.cache)
        ):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("target", TARGETS)
def test_tampering_is_detected_and_repaired(tmp_path: Path, target: str, operation: str) -> None:
    project, where, host, manifest = _applied(tmp_path)
    path = _target(target, where, manifest)
    outside = _outside(tmp_path, where)
    _tamper(path, operation)
    read, damage = state_damage(where)
    drifts = [f"{d.path} {d.message}" for d in damage]
    if read is not None:
        drifts += [f"{d.path} {d.message}" for d in verify(read, host, locations=where)]
    if (target, operation) in NOT_DAMAGE:
        assert drifts == []
    else:
        assert drifts, f"{operation} of the {target} file went unnoticed"
        shown = " ".join(drifts)
        assert str(path) in shown or path.parent.name in shown, shown
    result = apply(project.loaded(), project.lock(), host, where, jobs=2, repair=True)
    assert result.status == "applied"
    repaired = current_state(where)[1]
    assert repaired is not None and repaired.generation != manifest.generation
    assert verify(repaired, host, locations=where) == []
    assert state_damage(where)[1] == []
    assert _outside(tmp_path, where) == outside


# -- a file added to a generation --------------------------------------------------------------

# Where a file is added (relative to the generation) and what it is: each would run, or be
# importable, in every activated process. ``helper/__pycache__/evil...pyc`` has no listed
# source of its name; ``helper/__pycache__/__init__...opt-1.pyc`` (Python's own byte code of a
# listed module, at an optimisation level kvenv's compiled bytecode does not cover) is the one
# unlisted file that is not damage.
ADDED = {
    "sitecustomize": ("overlay/sitecustomize.py", "print('ran')\n"),
    "pth": ("overlay/zz-added.pth", "import os; os.environ['ADDED'] = '1'\n"),
    "module": ("native/addedmod.py", "X = 1\n"),
    "package module": ("overlay/helper/added.py", "X = 1\n"),
    "console script": ("bin/added-script", "#!/bin/sh\necho added\n"),
    "generation file": ("notes.txt", "left here\n"),
    "stray byte code": ("overlay/helper/__pycache__/evil.cpython-311.pyc", "x"),
    "symlink": ("overlay/linked", None),
}


@pytest.mark.parametrize("kind", sorted(ADDED))
def test_a_file_added_to_a_generation_is_detected_and_repaired(tmp_path: Path, kind: str) -> None:
    project, where, host, manifest = _applied(tmp_path)
    generation = where.generations / manifest.generation
    byte_code = generation / "overlay" / "helper" / "__pycache__" / "__init__.cpython-311.opt-1.pyc"
    byte_code.parent.mkdir(exist_ok=True)  # kvenv's own bytecode (kvenv.env.bytecode) is there
    byte_code.write_bytes(b"python's own")  # beside a listed module: not damage
    assert verify(manifest, host, locations=where) == []
    relative, text = ADDED[kind]
    path = generation / relative
    outside = _outside(tmp_path, where)
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        path.symlink_to(tmp_path)
    else:
        path.write_text(text)
    drifts = verify(manifest, host, locations=where)
    assert [(d.kind, d.path) for d in drifts] == [("added", str(path))]
    result = apply(project.loaded(), project.lock(), host, where, jobs=2, repair=True)
    assert result.status == "applied"
    assert not os.path.lexists(path), "apply --repair leaves the added file"
    assert any(str(path) in w for w in result.warnings), result.warnings
    assert byte_code.is_file()
    old = current_state(where)[1]
    assert old is not None and old.generation != manifest.generation
    assert verify(old, host, locations=where) == []
    assert verify(manifest, host, locations=where) == []  # the kept previous one, repaired too
    assert _outside(tmp_path, where) == outside


# -- a .pth planted in a generation is not executed by any activation ---------------------------


def test_a_pth_planted_in_a_generation_is_not_executed_by_any_activation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``.pth`` file added to a generation after apply (not in the manifest) never runs: not
    in a shell activated by ``kvenv activate``, not under ``kvenv run``, not in-process
    (``kvenv.activate()``). The control shows that ``site`` itself would run it."""
    import subprocess
    import sys

    from kvenv.env.activation import activate_in_process

    project, where, _, manifest = _applied(tmp_path)
    overlay = Path(manifest.dirs.overlay)
    marker = tmp_path / "planted-ran"
    (overlay / "zz-planted.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")
    control = subprocess.run(
        [sys.executable, "-c", f"import site; site.addsitedir({str(overlay)!r})"], check=True
    )
    assert control.returncode == 0 and marker.exists()  # a site dir would run it
    marker.unlink()
    env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    kvenv = [sys.executable, "-m", "kvenv"]
    args = [str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    run = subprocess.run(
        [*kvenv, "run", *args, "--", "python3", "-c", "import helper"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert not marker.exists(), "kvenv run executed a planted .pth"
    activate = " ".join(f"'{a}'" for a in [*kvenv, "activate", *args, "--shell", "bash"])
    shell = subprocess.run(
        [
            "bash",
            "--noprofile",
            "--norc",
            "-c",
            f'eval "$({activate})" && python3 -c "import helper"',
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 0, shell.stderr
    assert not marker.exists(), "an activated shell executed a planted .pth"
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = where.generations / manifest.generation / "manifest.json"
    assert activate_in_process(manifest=path) is True
    assert not marker.exists(), "kvenv.activate() executed a planted .pth"
