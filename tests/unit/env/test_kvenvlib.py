"""kvenv-lib: a script run in a generation imports kvenv.runtime from a host interpreter that
lacks kvenv, and nothing else of kvenv's environment leaks onto its path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.activation import build_activation
from kvenv.env.kvenvlib import KVENV_LIB, RUNTIME_REQUIREMENTS, expose_kvenv, links_for
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


def test_only_what_is_missing_is_linked() -> None:
    links, notes = links_for([])
    assert {"kvenv", "attr", "attrs", "cattrs", "packaging", "typing_extensions.py"} == set(links)
    assert (links["kvenv"] / "runtime" / "__init__.py").is_file()
    assert notes == []
    everything = ["kvenv-overlay", "attrs", "cattrs", "Packaging", "typing_extensions"]
    assert links_for(everything) == ({}, [])  # the host's (or overlay's) copies win


def test_what_lies_in_an_archive_is_one_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvenv run as a single file: its packages lie in the archive; one note names them all
    (not six notes, one per package)."""
    import kvenv.env.kvenvlib as kvenvlib

    archive = tmp_path / "kvenv.pyz"
    monkeypatch.setattr(kvenvlib, "_location", lambda name: archive / name)
    links, notes = links_for([])
    assert links == {}
    assert notes == [
        f"{KVENV_LIB}: kvenv, attr, attrs, cattrs, packaging, typing_extensions not linked: "
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
    assert expose_kvenv(generation, provided=["packaging"]) == []
    lib = generation / KVENV_LIB
    assert sorted(p.name for p in lib.iterdir()) == [
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
