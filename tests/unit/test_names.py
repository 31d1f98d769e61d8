"""No two kvenv modules define the same public name: a name says which thing it is wherever it
is imported. Read statically from the source; ``main`` (a script's entry point) and
``register`` (a CLI command group's hook) are protocol names every such module defines."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.paths import REPO

PROTOCOL_NAMES = frozenset({"main", "register", "TYPE_CHECKING"})


def public_names(package: Path) -> dict[str, list[str]]:
    """Public top-level names (functions, classes, assignments) -> the files defining them."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for name in names:
                if not name.startswith("_") and name not in PROTOCOL_NAMES:
                    found[name].append(str(path.relative_to(package.parent)))
    return found


def collisions(package: Path) -> dict[str, list[str]]:
    return {name: files for name, files in public_names(package).items() if len(files) > 1}


def test_no_public_name_is_defined_twice() -> None:
    assert collisions(REPO / "kvenv") == {}


def test_a_collision_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("class Shadow:\n    pass\n\ndef main():\n    pass\n")
    (package / "b.py").write_text("Shadow = 1\n_private = 2\n\ndef main():\n    pass\n")
    assert collisions(package) == {"Shadow": ["pkg/a.py", "pkg/b.py"]}
