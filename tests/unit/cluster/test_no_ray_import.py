"""Ray is an optional extra: ``import kvenv`` and every command but ``kvenv cluster`` never
import it (nor ``kvenv.cluster``), checked in fresh interpreters, and statically: only
``kvenv/cluster/`` and ``kvenv/cli/cluster.py`` reach Ray or ``kvenv.cluster`` at module level;
the runtime reaches it inside the Ray branch of a function only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

PROBE = """
import sys
{body}
bad = sorted(m for m in sys.modules if m == "ray" or m.startswith(("ray.", "kvenv.cluster")))
assert not bad, bad
print("clean")
"""

COMMANDS = [
    ["--version"],
    ["--help"],
    ["plan", "demo", "--json"],
    ["status", "demo", "--json"],
    ["profiles"],
    ["serve", "m", "--profile", "demo", "--dry-run", "--no-gpu-check"],
    ["inspect-shards", "/nonexistent"],
    ["fingerprint"],
]


def _run(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KVENV_ROOT": str(tmp_path / "r")}
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_kvenv_and_the_runtime_import_no_ray(tmp_path: Path) -> None:
    done = _run("import kvenv, kvenv.runtime, kvenv.runtime.llm, kvenv.runtime.serve", tmp_path)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_non_cluster_commands_import_no_ray(argv: list[str], tmp_path: Path) -> None:
    body = f"from kvenv.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
    done = _run(body, tmp_path)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr[-3000:]


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:  # module level only; TYPE_CHECKING blocks never run
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_cluster_modules_import_ray_or_the_cluster_package_at_module_level() -> None:
    allowed = {REPO / "kvenv" / "cli" / "cluster.py"}
    offenders = []
    for path in sorted((REPO / "kvenv").rglob("*.py")):
        if (REPO / "kvenv" / "cluster") in path.parents or path in allowed:
            continue
        for name in _module_level_imports(path):
            if name == "ray" or name.startswith(("ray.", "kvenv.cluster")):
                offenders.append(f"{path.relative_to(REPO)}: {name}")
    assert offenders == []


def test_the_cluster_package_imports_ray_only_inside_functions() -> None:
    for path in sorted((REPO / "kvenv" / "cluster").glob("*.py")):
        names = _module_level_imports(path)
        assert not {n for n in names if n == "ray" or n.startswith("ray.")}, path
