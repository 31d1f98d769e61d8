"""kvenv's import graph, read statically from the source: no import cycle, and no import that
breaks the layer rules stated in ``docs/architecture.md``.

The rules live here, in :data:`LAYERS`, :data:`ROOT_NAMES` and :data:`FACADE`; the doc's layer
table is checked against them, so the two cannot drift apart. What counts as an import:

- ``import kvenv.a.b`` and ``from kvenv.a import b`` (``b`` resolved to the submodule when it is
  one), relative imports resolved against the importing module's package;
- ``from kvenv.a import b`` also depends on the package ``kvenv.a`` itself: it takes ``b`` from
  the namespace that ``kvenv/a/__init__.py`` builds, so a module that takes a sibling through a
  package ``__init__`` that re-exports that module is a cycle (``import kvenv.a.b as b`` names
  the module directly);
- imports inside functions (lazy imports): they run, so they count for cycles and layers;
- a string constant that names a kvenv module exactly (``"kvenv.a.b"`` or ``"kvenv.a.b:Name"``):
  how ``importlib.import_module`` registries reach a module, so it counts like a lazy import;
- imports under ``if TYPE_CHECKING:`` never run: they do NOT count for cycles, but they DO count
  for the layer rules (a lower layer that names a higher layer's types still depends on it).

Importing ``kvenv.a.b`` (or ``from kvenv.a.b import x``) also initialises the package
``kvenv.a``; that implicit edge is not drawn (it would make every package whose ``__init__``
re-exports a submodule a cycle). Edges
into the root package ``kvenv`` are not followed for cycles either: Python initialises the
root before any submodule, and only :data:`ROOT_NAMES` may be taken from it.

See the graph yourself: ``python -m tests.unit.test_layering`` (packages) or
``python -m tests.unit.test_layering --modules`` (every module), from the repository root.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = "kvenv"

# Lowest first. A module may import modules of its own layer or of lower layers only.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kvenv.errors", "kvenv._util", "kvenv._version"),
    ("kvenv.model",),
    ("kvenv.probe",),
    ("kvenv.lock",),
    ("kvenv.plan",),
    ("kvenv.fetch",),
    ("kvenv.env",),
    ("kvenv.cluster",),
    ("kvenv.runtime",),
    ("kvenv.cli", "kvenv.__main__"),
)
# What any module may take from the root package ``kvenv``.
ROOT_NAMES = frozenset({"__version__"})
# The root package's own imports: ``kvenv.activate()`` is a lazy facade over activation, and
# ``__version__`` comes from the version file the build writes (hatch-vcs).
FACADE = frozenset({("kvenv", "kvenv.env.activation"), ("kvenv", "kvenv._version")})

_MODULE_STRING = re.compile(r"kvenv(?:\.\w+)+(?::\w+)?")


@dataclass(frozen=True)
class Import:
    """One dependency of ``importer`` on ``imported``, where it is written and how."""

    importer: str
    imported: str
    path: str  # relative to the tree's root
    line: int
    statement: str
    names: tuple[str, ...]  # the names of a ``from ... import``; empty for ``import``
    lazy: bool  # inside a function, or named in a string
    type_only: bool  # under ``if TYPE_CHECKING:``
    by_name: bool = False  # a string naming the module (an importlib registry)

    def where(self) -> str:
        how = (
            " (type-checking only)"
            if self.type_only
            else " (named in a string)"
            if self.by_name
            else " (lazy)"
            if self.lazy
            else ""
        )
        return f"{self.path}:{self.line}: `{self.statement}`{how}"


def find_modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(
    nodes: Iterable[ast.AST], lazy: bool = False, type_only: bool = False
) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node below ``nodes``, with whether it sits in a function / under TYPE_CHECKING."""
    for node in nodes:
        yield node, lazy, type_only
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _walk([node.test], lazy, type_only)
            yield from _walk(node.body, lazy, True)
            yield from _walk(node.orelse, lazy, type_only)
            continue
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(ast.iter_child_nodes(node), inner, type_only)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _targets(
    node: ast.AST, module: str, is_package: bool, modules: Mapping[str, Path]
) -> list[tuple[str, tuple[str, ...]]]:
    """The modules one node depends on, each with the names it takes from it."""
    if isinstance(node, ast.Import):
        return [(alias.name, ()) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _resolve(module, is_package, node.level, node.module)
        names = tuple(alias.name for alias in node.names)
        subs = [n for n in names if f"{base}.{n}" in modules]
        rest = tuple(n for n in names if n not in subs)
        targets: list[tuple[str, tuple[str, ...]]] = [(f"{base}.{n}", ()) for n in subs]
        # ``from kvenv.a import b`` takes ``b`` from the package's namespace: it runs
        # kvenv/a/__init__.py and depends on it, whatever that re-exports (the root package
        # aside: only ROOT_NAMES may be taken from it, a rule of its own)
        through = rest or not subs or base.count(".") > 0
        return [*targets, (base, rest)] if through else targets
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _MODULE_STRING.fullmatch(node.value)
        and node.value.partition(":")[0] in modules
    ):
        return [(node.value.partition(":")[0], ())]
    return []


def find_imports(root: Path, package: str = PACKAGE) -> tuple[list[Import], list[str]]:
    """Every kvenv-to-kvenv dependency in the tree, and the imports of kvenv modules that do
    not exist."""
    modules = find_modules(root, package)
    found: list[Import] = []
    missing: list[str] = []
    for module, path in modules.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, lazy, type_only in _walk(tree.body):
            by_name = isinstance(node, ast.Constant)
            for imported, names in _targets(node, module, path.name == "__init__.py", modules):
                if imported.split(".")[0] != package or imported == module:
                    continue
                line = getattr(node, "lineno", 0)
                statement = (
                    repr(node.value) if isinstance(node, ast.Constant) else ast.unparse(node)
                )
                if imported not in modules:
                    missing.append(f"{rel}:{line}: `{statement}`: no module {imported}")
                    continue
                found.append(
                    Import(
                        module,
                        imported,
                        rel,
                        line,
                        statement,
                        names,
                        lazy or by_name,
                        type_only,
                        by_name,
                    )
                )
    return found, missing


def package_of(module: str) -> str:
    """``kvenv.fetch.core`` -> ``kvenv.fetch``; ``kvenv.errors`` -> ``kvenv.errors``."""
    return ".".join(module.split(".")[:2])


def layer_violations(
    imports: Iterable[Import],
    layers: Sequence[Sequence[str]] = LAYERS,
    root_names: frozenset[str] = ROOT_NAMES,
    facade: frozenset[tuple[str, str]] = FACADE,
    package: str = PACKAGE,
) -> list[str]:
    """Each import that breaks the layer rules, as ``file:line: import: rule``."""
    layer_of = {pkg: index for index, group in enumerate(layers) for pkg in group}
    problems: list[str] = []
    for imp in imports:
        if imp.imported == package:
            taken = set(imp.names) - root_names
            if taken or not imp.names:
                wanted = ", ".join(sorted(taken)) or "the whole package"
                problems.append(
                    f"{imp.where()}: takes {wanted} from the root package; only "
                    f"{', '.join(sorted(root_names))} may be taken from `{package}`: "
                    "import the module that defines it"
                )
            continue
        if imp.importer == package:
            if (imp.importer, imp.imported) not in facade:
                problems.append(
                    f"{imp.where()}: the root package imports only its facade "
                    f"({', '.join(sorted(b for _, b in facade))})"
                )
            continue
        mine, theirs = package_of(imp.importer), package_of(imp.imported)
        for pkg in (mine, theirs):
            if pkg not in layer_of:
                problems.append(f"{imp.where()}: {pkg} is in no layer: add it to LAYERS")
        if mine in layer_of and theirs in layer_of and layer_of[theirs] > layer_of[mine]:
            problems.append(
                f"{imp.where()}: {mine} (layer {layer_of[mine]}) may not import {theirs} "
                f"(layer {layer_of[theirs]}): a module imports its own layer or lower layers "
                "only (docs/architecture.md)"
            )
    return list(dict.fromkeys(problems))  # `from kvenv.a import b` names kvenv.a.b and kvenv.a


def _graph(imports: Iterable[Import], package: str) -> dict[str, dict[str, Import]]:
    """Module -> imported module -> the first import that draws the edge, for cycles."""
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for imp in sorted(imports, key=lambda i: (i.path, i.line)):
        if not imp.type_only and imp.imported != package:
            graph[imp.importer].setdefault(imp.imported, imp)
    return graph


def _components(graph: Mapping[str, Mapping[str, Import]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {m for edges in graph.values() for m in edges})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


def _shortest_cycle(graph: Mapping[str, Mapping[str, Import]], members: list[str]) -> list[str]:
    """The shortest cycle through the first member, inside its component."""
    start, inside = members[0], set(members)
    came: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, {})):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [*reversed(path), start]
            if child in inside and child not in came:
                came[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def import_cycles(imports: Iterable[Import], package: str = PACKAGE) -> list[str]:
    """Each import cycle, as a readable chain with the line that draws each edge."""
    graph = _graph(imports, package)
    problems: list[str] = []
    for members in _components(graph):
        if len(members) == 1:
            continue
        chain = _shortest_cycle(graph, members)
        lines = [f"import cycle: {' → '.join(chain)}"]
        lines += [f"    {graph[a][b].where()}" for a, b in itertools.pairwise(chain)]
        if len(members) > len(chain) - 1:
            lines.append(
                f"    (the cycle's component holds {len(members)} modules: {', '.join(members)})"
            )
        problems.append("\n".join(lines))
    return problems


def check(
    root: Path, package: str = PACKAGE, layers: Sequence[Sequence[str]] = LAYERS
) -> list[str]:
    """Every problem of the tree under ``root``: missing modules, cycles, layer violations."""
    imports, missing = find_imports(root, package)
    return [*missing, *import_cycles(imports, package), *layer_violations(imports, layers)]


# ----------------------------------------------------------------------------- the real tree


def test_kvenv_has_no_import_cycle() -> None:
    imports, _ = find_imports(REPO)
    cycles = import_cycles(imports)
    assert not cycles, "\n" + "\n".join(cycles)


def test_kvenv_imports_follow_the_layers() -> None:
    imports, missing = find_imports(REPO)
    problems = [*missing, *layer_violations(imports)]
    assert not problems, "\n" + "\n".join(problems)


def test_every_kvenv_package_is_in_a_layer() -> None:
    layered = {pkg for group in LAYERS for pkg in group}
    packages = {package_of(m) for m in find_modules(REPO)} - {PACKAGE}
    assert packages - layered == set(), "add these packages to LAYERS and docs/architecture.md"
    assert layered - packages == set(), "LAYERS names packages that no longer exist"


def test_the_architecture_doc_states_these_layers() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    heading = "## Which package may import which"
    assert heading in text, f"docs/architecture.md has no section {heading!r}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, flags=re.MULTILINE)
    stated = tuple(tuple(re.findall(r"`(kvenv[\w.]*)`", cell)) for _, cell in rows)
    assert [int(n) for n, _ in rows] == list(range(len(LAYERS)))
    assert stated == LAYERS, "docs/architecture.md's layer table differs from LAYERS"


def test_the_root_facade_is_really_there() -> None:
    imports, _ = find_imports(REPO)
    drawn = {(i.importer, i.imported) for i in imports if i.lazy}
    drawn.add(("kvenv", "kvenv._version"))  # at import time: __version__ is a plain name
    assert drawn >= FACADE, "FACADE names an import kvenv/__init__.py no longer makes"
    made = {(i.importer, i.imported) for i in imports if not i.lazy and i.importer == PACKAGE}
    assert made <= {("kvenv", "kvenv._version")}, (
        "the root package imports eagerly only __version__"
    )


# ------------------------------------------------------------------- controls: synthetic trees


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in {"kvenv/__init__.py": '__version__ = "0"\n', **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent.parts and not init.exists():
                init.write_text("")
        path.write_text(text)
    return root


CLEAN = {
    "kvenv/errors.py": "class KvenvError(Exception): ...\n",
    "kvenv/_util/atomic.py": "from kvenv.errors import KvenvError\n",
    "kvenv/model/profile.py": "from kvenv import __version__\nfrom kvenv._util import atomic\n",
    "kvenv/model/loading.py": "from . import profile\nfrom .profile import __version__\n",
    "kvenv/cli/__init__.py": (
        "from kvenv.model.loading import profile\n"
        "def main():\n    from kvenv.cli import host\n"
        "GROUPS = ('kvenv.cli.host',)\n"
    ),
    "kvenv/cli/host.py": "from kvenv.errors import KvenvError\n",
    "kvenv/__main__.py": "from kvenv.cli import main\n",
}


def test_control_a_clean_tree_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, CLEAN)
    assert check(root) == []
    imports, _ = find_imports(root)
    edges = {(i.importer, i.imported) for i in imports}
    assert ("kvenv.model.loading", "kvenv.model.profile") in edges  # relative, submodule
    assert ("kvenv.model.profile", "kvenv._util.atomic") in edges  # `from pkg import module`
    assert ("kvenv.cli", "kvenv.cli.host") in edges  # lazy, and by string


def test_control_a_cycle_fails_with_its_chain(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            **CLEAN,
            "kvenv/model/a.py": "from kvenv.model import b\n",
            "kvenv/model/b.py": "def f():\n    from kvenv.model.a import x\n",
        },
    )
    problems = check(root)
    assert len(problems) == 1
    assert problems[0].startswith("import cycle: kvenv.model.a → kvenv.model.b → kvenv.model.a")
    assert "kvenv/model/b.py:2: `from kvenv.model.a import x` (lazy)" in problems[0]


def test_control_a_cycle_through_a_package_init(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            **CLEAN,
            "kvenv/fetch/__init__.py": "from kvenv.fetch.core import fetch\n",
            "kvenv/fetch/core.py": "from kvenv.fetch.bundle import open_bundle\n",
            "kvenv/fetch/bundle.py": "from kvenv.fetch import fetch\n",
        },
    )
    cycles = import_cycles(find_imports(root)[0])
    assert [c.splitlines()[0] for c in cycles] == [
        "import cycle: kvenv.fetch → kvenv.fetch.core → kvenv.fetch.bundle → kvenv.fetch"
    ]


def test_control_a_sibling_taken_through_a_reexporting_init_is_a_cycle(tmp_path: Path) -> None:
    files = {
        **CLEAN,
        "kvenv/runtime/__init__.py": "from kvenv.runtime.llm import LLM\n",
        "kvenv/runtime/gpus.py": "COUNT = 1\n",
        "kvenv/runtime/llm.py": "from kvenv.runtime import gpus\nLLM = gpus.COUNT\n",
    }
    cycles = import_cycles(find_imports(_tree(tmp_path, files))[0])
    assert [c.splitlines() for c in cycles] == [
        [
            "import cycle: kvenv.runtime → kvenv.runtime.llm → kvenv.runtime",
            "    kvenv/runtime/__init__.py:1: `from kvenv.runtime.llm import LLM`",
            "    kvenv/runtime/llm.py:1: `from kvenv.runtime import gpus`",
        ]
    ]
    files["kvenv/runtime/llm.py"] = "import kvenv.runtime.gpus as gpus\nLLM = gpus.COUNT\n"
    assert check(_tree(tmp_path, files)) == []


def test_control_type_checking_imports_make_no_cycle(tmp_path: Path) -> None:
    files = {
        **CLEAN,
        "kvenv/model/a.py": "from kvenv.model import b\n",
        "kvenv/model/b.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kvenv.model.a import x\nelse:\n    pass\n",
    }
    assert check(_tree(tmp_path, files)) == []


def test_control_a_lower_layer_importing_a_higher_one_fails(tmp_path: Path) -> None:
    files = {**CLEAN, "kvenv/model/bad.py": "import os\n\nfrom kvenv.cli import host\n"}
    problems = check(_tree(tmp_path, files))
    assert problems == [
        "kvenv/model/bad.py:3: `from kvenv.cli import host`: kvenv.model (layer 1) may not "
        "import kvenv.cli (layer 9): a module imports its own layer or lower layers only "
        "(docs/architecture.md)"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvenv.cli import host\n",
        "def f():\n    from ..cli.host import x\n",
        "SCHEMAS = {'x': 'kvenv.cli.host:Thing'}\n",
    ],
    ids=["type-checking", "lazy-relative", "string"],
)
def test_control_every_kind_of_upward_import_fails(tmp_path: Path, text: str) -> None:
    problems = check(_tree(tmp_path, {**CLEAN, "kvenv/model/bad.py": text}))
    assert len(problems) == 1 and "kvenv.model (layer 1) may not import kvenv.cli" in problems[0]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("kvenv/model/x.py", "from kvenv import activate\n", "takes activate from the root"),
        ("kvenv/model/x.py", "import kvenv\n", "takes the whole package from the root"),
        ("kvenv/__init__.py", "from kvenv.cli import host\n", "imports only its facade"),
        ("kvenv/extra/x.py", "from kvenv.errors import E\n", "kvenv.extra is in no layer"),
        ("kvenv/model/x.py", "from kvenv.nothing import y\n", "no module kvenv.nothing"),
    ],
)
def test_control_root_facade_unknown_package(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    problems = check(_tree(tmp_path, {**CLEAN, name: text}))
    assert len(problems) == 1 and expected in problems[0], problems


# ---------------------------------------------------------------------------- print the graph


def main(argv: Sequence[str]) -> int:
    """Print kvenv's import graph by package (``--modules``: by module), then any problem."""
    imports, _ = find_imports(REPO)
    layer_of = {pkg: index for index, group in enumerate(LAYERS) for pkg in group}
    by_module = "--modules" in argv
    key = (lambda m: m) if by_module else package_of
    edges: dict[str, dict[str, bool]] = {key(module): {} for module in find_modules(REPO)}
    for imp in imports:
        a, b = key(imp.importer), key(imp.imported)
        if a != b:
            edges[a][b] = edges[a].get(b, True) and imp.type_only
    for node in sorted(edges, key=lambda n: (layer_of.get(package_of(n), -1), n)):
        layer = layer_of.get(package_of(node), "-")
        shown = [f"{b} (type-checking only)" if t else b for b, t in sorted(edges[node].items())]
        print(f"[{layer}] {node} -> {', '.join(shown) or '(nothing)'}")
    problems = check(REPO)
    print("\n".join(["", *problems]) if problems else "\nno cycle, no layer violation")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
