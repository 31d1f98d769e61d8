"""docs/architecture.md lists every module of kvenv/, one line each, and nothing else: a module
added without its line, or a line left behind by a deleted module, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

SECTION = "## The packages and their modules"
# One entry: ``- `kvenv/pkg/module.py` — what it is for`` on one line.
_ENTRY = re.compile(r"^- `(kvenv/[\w/]+\.py)` — (\S.*)$", re.MULTILINE)
_NAMED = re.compile(r"^- `(kvenv/[^`]*)`", re.MULTILINE)


def doc_drift(root: Path) -> list[str]:
    """How ``root``'s docs/architecture.md module list differs from the modules under
    ``root/kvenv``: one line per problem, naming the doc's line or the module's file."""
    doc = root / "docs" / "architecture.md"
    text = doc.read_text(encoding="utf-8")
    if SECTION not in text:
        return [f"docs/architecture.md: no section {SECTION!r}: add it, one line per module"]
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    first_line = text[:start].count("\n") + 1

    def line_of(offset: int) -> int:
        return first_line + section[:offset].count("\n")

    problems: list[str] = []
    listed: dict[str, int] = {}
    entries = {m.start(): m for m in _ENTRY.finditer(section)}
    for named in _NAMED.finditer(section):
        line = line_of(named.start())
        if named.start() not in entries:
            problems.append(
                f"docs/architecture.md:{line}: `{named.group(1)}` is not written as "
                "'- `kvenv/pkg/module.py` — what it is for' on one line"
            )
            continue
        path = named.group(1)
        if path in listed:
            problems.append(
                f"docs/architecture.md:{line}: {path} is listed again (first on line "
                f"{listed[path]}): keep one line"
            )
        listed.setdefault(path, line)
    modules = {p.relative_to(root).as_posix() for p in (root / "kvenv").rglob("*.py")}
    for path in sorted(set(listed) - modules):
        problems.append(
            f"docs/architecture.md:{listed[path]}: lists {path}, which does not exist: "
            "remove its line"
        )
    for path in sorted(modules - set(listed)):
        problems.append(
            f"{path}: not in docs/architecture.md ({SECTION!r}): add "
            f"'- `{path}` — what it is for' under its package"
        )
    return problems


def test_the_architecture_doc_lists_every_module_and_no_other() -> None:
    problems = doc_drift(REPO)
    assert problems == [], "\n" + "\n".join(problems)


# ------------------------------------------------------------------- controls: synthetic trees


def _tree(root: Path, modules: list[str], doc: str) -> Path:
    for name in modules:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('"""A module."""\n')
    (root / "docs").mkdir()
    (root / "docs" / "architecture.md").write_text(doc)
    return root


DOC = f"""# Architecture

{SECTION}

### `kvenv/env/`

- `kvenv/__init__.py` — the root.
- `kvenv/env/__init__.py` — the package.
- `kvenv/env/root.py` — the root's layout.

## Next

- `kvenv/elsewhere.py` — outside the section: not counted.
"""


def test_control_a_matching_doc_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, ["kvenv/__init__.py", "kvenv/env/__init__.py", "kvenv/env/root.py"], DOC)
    assert doc_drift(root) == []


def test_control_a_module_the_doc_misses_is_named(tmp_path: Path) -> None:
    modules = ["kvenv/__init__.py", "kvenv/env/__init__.py", "kvenv/env/root.py"]
    root = _tree(tmp_path, [*modules, "kvenv/env/answers.py"], DOC)
    assert doc_drift(root) == [
        f"kvenv/env/answers.py: not in docs/architecture.md ({SECTION!r}): add "
        "'- `kvenv/env/answers.py` — what it is for' under its package"
    ]


def test_control_a_listed_module_that_is_gone_is_named_with_its_line(tmp_path: Path) -> None:
    root = _tree(tmp_path, ["kvenv/__init__.py", "kvenv/env/__init__.py"], DOC)
    assert doc_drift(root) == [
        "docs/architecture.md:9: lists kvenv/env/root.py, which does not exist: remove its line"
    ]


def test_control_a_malformed_or_repeated_line_is_named(tmp_path: Path) -> None:
    doc = DOC.replace(
        "- `kvenv/env/root.py` — the root's layout.",
        "- `kvenv/env/root.py`: the root's layout.\n- `kvenv/env/__init__.py` — again.",
    )
    root = _tree(tmp_path, ["kvenv/__init__.py", "kvenv/env/__init__.py", "kvenv/env/root.py"], doc)
    assert doc_drift(root) == [
        "docs/architecture.md:9: `kvenv/env/root.py` is not written as "
        "'- `kvenv/pkg/module.py` — what it is for' on one line",
        "docs/architecture.md:10: kvenv/env/__init__.py is listed again (first on line 8): "
        "keep one line",
        f"kvenv/env/root.py: not in docs/architecture.md ({SECTION!r}): add "
        "'- `kvenv/env/root.py` — what it is for' under its package",
    ]


def test_control_a_doc_without_the_section_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, ["kvenv/__init__.py"], "# Architecture\n")
    assert doc_drift(root) == [
        f"docs/architecture.md: no section {SECTION!r}: add it, one line per module"
    ]
