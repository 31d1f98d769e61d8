"""The lock's graph (``kvenv why``/``tree``), pure: edges from recorded requirements with
markers evaluated, host and waived names, every chain from a root, trees drawn once; and
properties over random graphs (each chain a real path, none twice, none missing)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from kvenv.lock.graph import ROOT, LockGraph, Package, TreeNode, build_graph, chains, tree


def _no_windows(marker: str | None, extras: frozenset[str]) -> bool:
    """A tiny target: Linux, extras as given."""
    if marker is None:
        return True
    if "win32" in marker:
        return False
    if "extra ==" in marker:
        return any(f'"{e}"' in marker for e in extras)
    return True


def _graph() -> LockGraph:
    return build_graph(
        [
            Package(
                "native", "1.0", ("alpha>=1", "torch==2.1", "cudart; extra == 'x'"), native=True
            ),
            Package("alpha", "1.2", ("beta[fast]>=2", 'gamma; sys_platform == "win32"')),
            Package("beta", "2.1", ('delta; extra == "fast"', "numpy"), extras=("fast",)),
            Package("delta", "1.5", ("alpha",)),  # a cycle back to alpha
            Package("rich", "13.0", ("alpha",)),
        ],
        declared=("rich>=13", "numpy"),
        evaluate=_no_windows,
        protected=("torch",),
        waivers={"cudart": "the host's CUDA"},
        host_versions={"numpy": "2.0.2", "torch": "2.1"},
    )


def test_edges_follow_markers_extras_host_and_waivers() -> None:
    graph = _graph()
    assert {e.child: e.kind for e in graph.children(ROOT)} == {
        "native": "native",
        "rich": "declared",
        "numpy": "host",
    }
    assert [e.child for e in graph.children("alpha")] == ["beta"]  # gamma is Windows-only
    assert [e.child for e in graph.children("beta")] == ["delta", "numpy"]  # extra fast in use
    native = {e.child: e.kind for e in graph.children("native")}
    assert native == {"alpha": "locked", "torch": "host"}  # extra x not in use: no cudart
    assert graph.nodes["torch"].protected and graph.nodes["torch"].version == "2.1"
    assert graph.nodes["numpy"].label() == "numpy 2.0.2 (host)"
    assert "gamma" not in graph.nodes


def test_a_waived_requirement_is_its_own_kind() -> None:
    graph = build_graph(
        [Package("native", "1.0", ("cudart",), native=True)],
        evaluate=lambda m, e: True,
        waivers={"cudart": "the host's CUDA"},
    )
    (edge,) = graph.children("native")
    assert edge.kind == "waived"
    assert graph.nodes["cudart"].label() == "cudart (waived: the host's CUDA)"


def test_every_chain_to_a_name_shortest_first() -> None:
    graph = _graph()
    found, truncated = chains(graph, "Delta")  # names are normalised
    assert not truncated
    paths = [[e.child for e in chain] for chain in found]
    assert paths == [
        ["native", "alpha", "beta", "delta"],
        ["rich", "alpha", "beta", "delta"],
    ]
    numpy = [[e.child for e in chain] for chain in chains(graph, "numpy")[0]]
    assert numpy[0] == ["numpy"]  # declared directly
    assert ["native", "alpha", "beta", "numpy"] in numpy
    assert chains(graph, "torch")[0][0][-1].requirement == "torch==2.1"


def test_chains_are_capped() -> None:
    found, truncated = chains(_graph(), "numpy", limit=1)
    assert len(found) == 1 and truncated


def test_the_tree_draws_each_subtree_once_and_its_inverse_reaches_the_roots() -> None:
    graph = _graph()
    tops = tree(graph)
    assert [t.node.name for t in tops] == ["native", "numpy", "rich"]

    def names(node: TreeNode) -> list[tuple[str, bool]]:
        found = [(node.node.name, node.repeated)]
        for child in node.children:
            found += names(child)
        return found

    drawn = [n for t in tops for n in names(t)]
    full = [name for name, repeated in drawn if not repeated]
    assert sorted(set(full)) == sorted(full)  # no subtree drawn twice
    assert ("alpha", True) in drawn  # rich's alpha: drawn under native first
    (inverse,) = tree(graph, invert="delta")
    assert inverse.inverted and inverse.node.name == "delta"
    beta = inverse.children[0]
    assert beta.node.name == "beta" and beta.edge is not None
    assert beta.edge.requirement == 'delta; extra == "fast"'
    alpha = beta.children[0]
    assert sorted(c.node.name for c in alpha.children) == ["delta", "native", "rich"]
    rich = next(c for c in alpha.children if c.node.name == "rich")
    assert rich.roots == ("rich>=13",)
    assert inverse.to_json()["required-by"][0]["name"] == "beta"


# properties --------------------------------------------------------------------------------

NAMES = [f"p{i}" for i in range(7)]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[Package], tuple[str, ...]]:
    count = draw(st.integers(min_value=1, max_value=len(NAMES)))
    names = NAMES[:count]
    packages = []
    for index, name in enumerate(names):
        wanted = draw(st.lists(st.sampled_from([*NAMES, "hostpkg"]), max_size=4, unique=True))
        packages.append(Package(name, "1.0", tuple(wanted), native=index == 0))
    declared = tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True)))
    return packages, declared


def _simple_paths(graph: LockGraph, want: str) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()

    def walk(node: str, path: tuple[str, ...]) -> None:
        for edge in graph.children(node):
            if edge.child in path or edge.child == ROOT:
                continue
            if edge.child == want:
                found.add((*path, edge.child))
            else:
                walk(edge.child, (*path, edge.child))

    walk(ROOT, ())
    return found


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_chains_are_exactly_the_simple_paths_from_the_root(
    case: tuple[list[Package], tuple[str, ...]],
) -> None:
    packages, declared = case
    graph = build_graph(packages, declared=declared, evaluate=lambda m, e: True)
    for name in graph.names():
        found, truncated = chains(graph, name)
        assert not truncated
        as_paths = [tuple(e.child for e in chain) for chain in found]
        assert len(as_paths) == len(set(as_paths))  # none twice
        assert set(as_paths) == _simple_paths(graph, name)  # none missing, none invented
        for chain in found:
            assert chain[0].parent == ROOT and chain[-1].child == name
            for first, second in pairwise(chain):
                assert first.child == second.parent
                assert second in graph.children(first.child)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_the_tree_draws_every_reachable_node_once(
    case: tuple[list[Package], tuple[str, ...]],
) -> None:
    packages, declared = case
    graph = build_graph(packages, declared=declared, evaluate=lambda m, e: True)

    def full(node: TreeNode) -> list[str]:
        if node.repeated:
            return []
        return [node.node.name] + [n for c in node.children for n in full(c)]

    drawn = [n for top in tree(graph) for n in full(top)]
    reachable = {name for name in graph.names() if _simple_paths(graph, name)}
    assert len(drawn) == len(set(drawn))
    assert set(drawn) == reachable
