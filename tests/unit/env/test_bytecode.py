"""Bytecode travels with the store (kvenv.env.bytecode): each wheel's modules compiled once
per store entry and interpreter cache tag by the host interpreter, sealed as a store entry of
its own, hard-linked into generations with a RECORD that lists every ``.pyc``; a tampered
``.pyc`` is seen by ``verify`` and compiled again by the next apply; an entry reused by another
interpreter gets that interpreter's bytecode; ``compile=False`` makes none."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from kvenv.env.bytecode import BYTECODE_FORMAT, bytecode_key, lookup_bytecode
from kvenv.env.manifest import Manifest
from kvenv.env.root import current_state
from kvenv.env.seal import seal_problem
from kvenv.env.store import lookup
from kvenv.env.verify import verify
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    sha256_of,
    standard_project,
)

TAG = sys.implementation.cache_tag
PYC = f"helper/__pycache__/__init__.{TAG}.pyc"


def _applied(project: Project, where: Locations, site: Path, **options: object) -> Manifest:
    result = apply(project.loaded(), project.lock(), host_snapshot(site), where, jobs=2, **options)
    assert result.status == "applied", result
    _, manifest = current_state(where)
    assert manifest is not None
    return manifest


def _helper_sha(project: Project) -> str:
    return sha256_of(project.overlay[0])


def _edit_in_place(path: Path, data: bytes) -> None:
    """Change a sealed file's bytes through its inode (a write through a hard link)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    os.chmod(path, mode | stat.S_IWUSR)
    with open(path, "r+b") as stream:
        stream.write(data)
    os.chmod(path, mode)


def test_bytecode_is_compiled_sealed_and_linked(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    where = locations(tmp_path)
    manifest = _applied(project, where, site)
    sha = _helper_sha(project)
    code = lookup_bytecode(where.store, sha, TAG)
    assert code is not None and code.path.name == bytecode_key(sha, TAG)
    assert code.pyc == {
        "helper/__init__.py": PYC,
        "helper_sub/sub_mod.py": f"helper_sub/__pycache__/sub_mod.{TAG}.pyc",
    }
    assert seal_problem(code.path) is None
    stored = code.path / "site" / PYC
    assert not stored.stat().st_mode & 0o222  # sealed read-only like every store entry
    # the wheel's own entry is unchanged: no bytecode in it
    entry = lookup(where.store, sha)
    assert entry is not None and not list(entry.path.rglob("__pycache__"))
    # linked into the generation, and listed with its hash in the generation's RECORD
    installed = Path(manifest.dirs.overlay) / PYC
    assert installed.stat().st_ino == stored.stat().st_ino
    data = installed.read_bytes()
    assert int.from_bytes(data[4:8], "little") == 0b01  # PEP 552: hash-based, unchecked
    dist = next(d for d in manifest.distributions if d.name == "helper")
    record = (Path(manifest.dirs.overlay) / dist.dist_info / "RECORD").read_text()
    assert f"{PYC},sha256=" in record
    assert verify(manifest, None, locations=where) == []
    # the host interpreter imports the module from it, source never compiled
    env = dict(os.environ, PYTHONPATH=manifest.dirs.overlay, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-v", "-c", "import helper"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"code object from '{installed}'" in done.stderr, done.stderr


def test_a_tampered_pyc_is_detected_and_compiled_again(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    first = locations(tmp_path)
    manifest = _applied(project, first, site)
    installed = Path(manifest.dirs.overlay) / PYC
    original = installed.read_bytes()
    _edit_in_place(installed, original[:16] + b"\x00" * 8)  # the store's file too: a hard link
    drifts = verify(manifest, None, locations=first)
    assert [(d.kind, d.path) for d in drifts] == [("modified", str(installed))]
    code = lookup_bytecode(first.store, _helper_sha(project), TAG)
    assert code is not None and seal_problem(code.path) is not None

    second = Locations(root=tmp_path / "root2", cache=first.cache)  # warm store
    result = apply(project.loaded(), project.lock(), host_snapshot(site), second, jobs=2)
    assert any("bytecode of helper" in w and "compiled again" in w for w in result.warnings)
    _, fresh = current_state(second)
    assert fresh is not None
    assert (Path(fresh.dirs.overlay) / PYC).read_bytes() == original
    assert verify(fresh, None, locations=second) == []


def _other_interpreter(tmp_path: Path, tag: str) -> Path:
    """This interpreter, reporting the cache tag ``tag`` (as a Python of another version
    would): kvenv runs it as ``python -S -s -c CODE``."""
    wrapper = tmp_path / "otherpython"
    wrapper.write_text(
        "#!/bin/sh\nfor last; do :; done\n"
        f"exec {sys.executable} -S -s -c \"import sys; sys.implementation.cache_tag = '{tag}'\n"
        '$last"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def test_an_entry_reused_for_another_interpreter_gets_its_own_bytecode(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    first = locations(tmp_path)
    manifest = _applied(project, first, site)
    other = _other_interpreter(tmp_path, "cpython-399")
    second = Locations(root=tmp_path / "root2", cache=first.cache)
    again = _applied(project, second, site, python=str(other))
    sha = _helper_sha(project)
    # the wheel's entry was reused (the same file), the bytecode is the other tag's only
    source = "helper/__init__.py"
    assert (Path(again.dirs.overlay) / source).stat().st_ino == (
        Path(manifest.dirs.overlay) / source
    ).stat().st_ino
    pycache = Path(again.dirs.overlay) / "helper" / "__pycache__"
    assert sorted(p.name for p in pycache.iterdir()) == ["__init__.cpython-399.pyc"]
    first_pycache = Path(manifest.dirs.overlay) / "helper" / "__pycache__"
    assert sorted(p.name for p in first_pycache.iterdir()) == [f"__init__.{TAG}.pyc"]
    both = [lookup_bytecode(first.store, sha, t) for t in (TAG, "cpython-399")]
    assert all(c is not None and seal_problem(c.path) is None for c in both)
    assert both[0] != both[1]
    assert verify(again, None, locations=second) == []


def test_no_compile_makes_no_bytecode(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    site = fake_host_site(tmp_path)
    where = locations(tmp_path)
    manifest = _applied(project, where, site, compile=False)
    assert not list(Path(manifest.dirs.generation).rglob("*.pyc"))
    assert lookup_bytecode(where.store, _helper_sha(project), TAG) is None
    assert verify(manifest, None, locations=where) == []


def test_bytecode_of_a_shadowed_source_is_shadowed_too(tmp_path: Path) -> None:
    """Two wheels of one layer ship the same module with different bytes: the first in name
    order keeps it and its bytecode; one conflict is reported (the source's), and verify
    checks the winner's .pyc, not the loser's RECORD row."""
    from tests.support.applyenv import native_wheel, write_project
    from tests.support.wheels import build_wheel

    wheels = tmp_path / "proj" / "wheels"
    alpha = build_wheel(wheels, "alpha", "1.0", files={"shared.py": "WHO = 'alpha'\n"})
    zeta = build_wheel(wheels, "zeta", "1.0", files={"shared.py": "WHO = 'zeta'\n"})
    project = write_project(tmp_path / "proj", native=native_wheel(wheels), overlay=[alpha, zeta])
    site = fake_host_site(tmp_path)
    where = locations(tmp_path)
    manifest = _applied(project, where, site)
    assert [(c.file, c.winner, c.loser) for c in manifest.conflicts] == [
        ("shared.py", "alpha", "zeta")
    ]
    pyc = Path(manifest.dirs.overlay) / "__pycache__" / f"shared.{TAG}.pyc"
    code = lookup_bytecode(where.store, sha256_of(alpha), TAG)
    assert code is not None and code.pyc["shared.py"] == f"__pycache__/shared.{TAG}.pyc"
    assert pyc.stat().st_ino == (code.path / "site" / code.pyc["shared.py"]).stat().st_ino
    assert verify(manifest, None, locations=where) == []
    assert BYTECODE_FORMAT == 1


def test_cache_verify_reports_a_tampered_bytecode_entry(tmp_path: Path) -> None:
    from kvenv.env.integrity import cache_damage

    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    _applied(project, where, fake_host_site(tmp_path))
    code = lookup_bytecode(where.store, _helper_sha(project), TAG)
    assert code is not None and cache_damage(where) == []
    _edit_in_place(code.path / "site" / PYC, b"\x00")
    assert [d.path for d in cache_damage(where)] == [str(code.path / "site" / PYC)]


def test_a_module_that_does_not_compile_has_no_bytecode(tmp_path: Path) -> None:
    """As with pip: a source the interpreter cannot compile (Python 2 test data) gets no .pyc,
    the others of the wheel do, and the apply and verify succeed."""
    from tests.support.applyenv import native_wheel, write_project
    from tests.support.wheels import build_wheel

    wheels = tmp_path / "proj" / "wheels"
    odd = build_wheel(
        wheels, "odd", "1.0", files={"odd/__init__.py": "X = 1\n", "odd/py2.py": "print 'old'\n"}
    )
    project = write_project(tmp_path / "proj", native=native_wheel(wheels), overlay=[odd])
    where = locations(tmp_path)
    manifest = _applied(project, where, fake_host_site(tmp_path))
    pycache = Path(manifest.dirs.overlay) / "odd" / "__pycache__"
    assert sorted(p.name for p in pycache.iterdir()) == [f"__init__.{TAG}.pyc"]
    assert verify(manifest, None, locations=where) == []


def test_an_interpreter_that_cannot_compile_leaves_a_warning_not_a_failure(
    tmp_path: Path,
) -> None:
    """Bytecode is an optimisation: the host interpreter failing to compile (here: it exits
    with an error as soon as it is handed the compiler) is a warning naming it and its last
    error line; the generation is built without bytecode."""
    wrapper = tmp_path / "brokenpython"
    wrapper.write_text(
        "#!/bin/sh\nfor last; do :; done\n"
        'case "$last" in *sys.stdin*) echo "no room for bytecode" >&2; exit 3;; esac\n'
        f"exec {sys.executable} -S -s -c "
        "\"import sys; sys.implementation.cache_tag = 'cpython-398'\n"
        '$last"\n'
    )
    wrapper.chmod(0o755)
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    site = fake_host_site(tmp_path)
    result = apply(
        project.loaded(), project.lock(), host_snapshot(site), where, jobs=2, python=str(wrapper)
    )
    assert result.status == "applied" and not result.repaired
    assert any(
        "did not compile bytecode for cpython-398" in w and "no room for bytecode" in w
        for w in result.warnings
    ), result.warnings
    _, manifest = current_state(where)
    assert manifest is not None
    assert not list(Path(manifest.dirs.generation).rglob("*.pyc"))
    assert verify(manifest, None, locations=where) == []
