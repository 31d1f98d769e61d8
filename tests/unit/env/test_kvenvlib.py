"""kvenv-lib: a script run in a generation imports kvenv.runtime from a host interpreter that
lacks kvenv, nothing else of kvenv's environment leaks onto its path, and the generation does
not depend on kvenv's own installation (a sealed store copy, checked by verify)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.activation import build_activation
from kvenv.env.kvenvlib import KVENV_LIB, RUNTIME_REQUIREMENTS, expose_kvenv, sources_for
from tests.support.paths import REPO

_IMPORTS = """
import json, sys
before = set(sys.modules)
import kvenv.runtime
from kvenv.runtime.llm import runtime_defaults
runtime_defaults("demo")
import kvenv.env.manifest, kvenv.runtime.serve
tops = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(t for t in tops if t not in sys.stdlib_module_names)))
"""


def test_the_requirements_are_what_the_runtime_imports() -> None:
    """RUNTIME_REQUIREMENTS lists every third-party import of kvenv.runtime and of loading a
    profile: a new one would make `import kvenv.runtime` fail in a generation."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS], capture_output=True, text=True, check=True, cwd=REPO
    )
    imported = set(json.loads(result.stdout)) - {"kvenv", "_distutils_hack"}
    listed = {name for names in RUNTIME_REQUIREMENTS.values() for name in names}
    assert imported <= listed, f"kvenv.runtime imports {sorted(imported - listed)} too"


def test_only_what_is_missing_is_copied() -> None:
    sources, notes = sources_for([])
    assert {"kvenv", "attr", "attrs", "cattrs", "packaging", "typing_extensions.py"} == set(sources)
    assert (sources["kvenv"] / "runtime" / "__init__.py").is_file()
    assert notes == []
    everything = ["kvenv-overlay", "attrs", "cattrs", "Packaging", "typing_extensions"]
    assert sources_for(everything) == ({}, [])  # the host's (or overlay's) copies win


def test_what_lies_in_an_archive_is_one_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvenv run as a single file: its packages lie in the archive; one note names them all
    (not six notes, one per package)."""
    import kvenv.env.kvenvlib as kvenvlib

    archive = tmp_path / "kvenv.pyz"
    monkeypatch.setattr(kvenvlib, "_location", lambda name: archive / name)
    sources, notes = sources_for([])
    assert sources == {}
    assert notes == [
        f"{KVENV_LIB}: kvenv, attr, attrs, cattrs, packaging, typing_extensions not copied: "
        "kvenv runs from an archive (a single file); a program in the generation imports them "
        "only from the host"
    ]


def _bare_python(tmp_path: Path) -> Path:
    """A host interpreter without kvenv or any of its requirements."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "host")], check=True
    )
    return tmp_path / "host" / "bin" / "python"


def test_a_generation_script_imports_kvenv_runtime_without_shadowing(tmp_path: Path) -> None:
    python = _bare_python(tmp_path)
    generation = tmp_path / "generation"
    overlay, native = generation / "overlay", generation / "native"
    for directory in (overlay, native):
        directory.mkdir(parents=True)
    import packaging

    shutil.copytree(Path(packaging.__file__).parent, overlay / "packaging")  # the overlay's
    _, notes = expose_kvenv(generation, ["packaging"], tmp_path / "store")
    assert notes == []
    lib = generation / KVENV_LIB
    assert sorted(p.name for p in lib.iterdir()) == [
        ".kvenv-lib.json",
        "attr",
        "attrs",
        "cattrs",
        "kvenv",
        "typing_extensions.py",
    ]
    activation, _ = build_activation(
        generation=generation,
        overlay=overlay,
        native=native,
        bin_dir=generation / "bin",
        host=None,
        env={},
        protected=(),
    )
    assert activation.pythonpath[-1] == str(lib)  # last: after the overlay and native dirs
    script = (
        "import kvenv.runtime, kvenv, sys\n"
        "print(kvenv.__file__)\n"
        "print(sys.modules['packaging'].__file__)\n"
        "for name in ('filelock', 'huggingface_hub'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        print('absent', name)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(activation.pythonpath)}
    result = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(lib / "kvenv" / "__init__.py")
    assert lines[1] == str(overlay / "packaging" / "__init__.py")  # the overlay's, not kvenv's
    # kvenv's own environment has both; only what kvenv-lib links is visible
    assert lines[2:] == ["absent filelock", "absent huggingface_hub"]


def test_a_generation_outlives_kvenvs_own_installation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvenv installed one way applies; its installation is then removed (as `pip install -e .`
    over a regular install removes the regular one): `kvenv run ... python -c 'import
    kvenv.runtime'` still works from the generation's own copy, and verify passes; a change to
    that copy, or a file added to it, is drift (issue 37)."""
    from kvenv.env import kvenvlib
    from kvenv.env.root import current_state
    from kvenv.env.verify import verify
    from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project
    from tests.support.applyenv import locations as where_of

    installed = tmp_path / "site-packages-of-kvenv"
    shutil.copytree(
        REPO / "kvenv", installed / "kvenv", ignore=shutil.ignore_patterns("__pycache__")
    )
    real = kvenvlib._location
    monkeypatch.setattr(
        kvenvlib, "_location", lambda name: installed / "kvenv" if name == "kvenv" else real(name)
    )
    project = local_project(tmp_path / "proj")
    where = where_of(tmp_path)
    host = host_snapshot(fake_host_site(tmp_path))
    assert apply(project.loaded(), project.lock(), host, where).status == "applied"
    manifest = current_state(where)[1]
    assert manifest is not None and manifest.kvenv_lib is not None
    shutil.rmtree(installed)  # kvenv's installation is gone
    python = _bare_python(tmp_path)
    code = (
        "import kvenv, kvenv.runtime\n"
        "from kvenv.runtime.llm import runtime_defaults\n"
        "runtime_defaults('demo')\n"
        "print(kvenv.__file__)\n"
    )
    env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    args = [str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    done = subprocess.run(
        [sys.executable, "-m", "kvenv", "run", *args, "--", str(python), "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    generation = where.generations / manifest.generation
    assert done.stdout.strip() == str(generation / KVENV_LIB / "kvenv" / "__init__.py")
    assert verify(manifest, host, locations=where) == []
    # the copy is held to its listing: an edit (the store's inode too) and an added file
    edited = generation / KVENV_LIB / "kvenv" / "__init__.py"
    edited.chmod(0o644)
    with edited.open("a") as stream:
        stream.write("# changed\n")
    added = generation / KVENV_LIB / "sitecustomize.py"
    added.write_text("print('added')\n")
    drifts = {(d.kind, d.path) for d in verify(manifest, host, locations=where)}
    assert ("modified", str(edited)) in drifts
    assert ("added", str(added)) in drifts
    assert any(kind == "store" for kind, _ in drifts)  # the sealed entry saw it too


def test_an_older_generations_dangling_links_are_drift(tmp_path: Path) -> None:
    """A generation applied before kvenv-lib was a store entry holds symlinks into kvenv's
    installation: once that is gone, verify says so (it used to pass)."""
    import attrs

    from kvenv.env.root import current_state
    from kvenv.env.seal import remove_sealed
    from kvenv.env.verify import verify
    from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project
    from tests.support.applyenv import locations as where_of

    project = local_project(tmp_path / "proj")
    where = where_of(tmp_path)
    host = host_snapshot(fake_host_site(tmp_path))
    apply(project.loaded(), project.lock(), host, where)
    manifest = current_state(where)[1]
    assert manifest is not None
    lib = where.generations / manifest.generation / KVENV_LIB
    remove_sealed(lib)
    lib.mkdir()
    installed = tmp_path / "old-install" / "kvenv"
    installed.mkdir(parents=True)
    (lib / "kvenv").symlink_to(installed, target_is_directory=True)
    old = attrs.evolve(manifest, kvenv_lib=None)
    assert verify(old, host) == []
    shutil.rmtree(installed.parent)  # the installation is replaced
    (drift,) = verify(old, host)
    assert (drift.kind, drift.path) == ("missing", str(lib / "kvenv"))
    assert "installation of kvenv that is gone" in drift.message
