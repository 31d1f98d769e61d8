"""Every kvenv module, package ``__init__`` included, opens with a docstring saying its job."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO


def modules_without_docstring(root: Path, package: str = "kvenv") -> list[str]:
    """The files of ``package`` under ``root`` whose module docstring is missing or blank."""
    missing = []
    for path in sorted((root / package).rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not (docstring and docstring.strip()):
            missing.append(path.relative_to(root).as_posix())
    return missing


def test_every_kvenv_module_has_a_docstring() -> None:
    missing = modules_without_docstring(REPO)
    assert missing == [], "add a module docstring saying its one job to: " + ", ".join(missing)


def test_control_a_module_without_a_docstring_is_named(tmp_path: Path) -> None:
    (tmp_path / "kvenv" / "sub").mkdir(parents=True)
    (tmp_path / "kvenv" / "__init__.py").write_text('"""The package."""\n')
    (tmp_path / "kvenv" / "sub" / "__init__.py").write_text("")
    (tmp_path / "kvenv" / "sub" / "a.py").write_text('import os\n"""Not a docstring."""\n')
    (tmp_path / "kvenv" / "sub" / "b.py").write_text('"""   """\n')
    (tmp_path / "kvenv" / "sub" / "c.py").write_text('"""Does c."""\nimport os\n')
    assert modules_without_docstring(tmp_path) == [
        "kvenv/sub/__init__.py",
        "kvenv/sub/a.py",
        "kvenv/sub/b.py",
    ]
