"""A lock's dependency graph, from the lock alone (pure): who requires what, from the roots (the
native wheel and each declared requirement) down to every locked package, and to the host
packages and waivers the lock relies on. ``kvenv why`` lists every chain from a root to one
name (:func:`chains`); ``kvenv tree`` draws the graph, or its inverse from one name
(:func:`tree`).

Edges come from each package's recorded Requires-Dist lines (``[packages.tool.kvenv]
requires``) with their markers evaluated for the target by the caller's ``evaluate`` (the
extras in use included), and from its PEP 751 ``dependencies``: a requirement on a locked
package is a ``locked`` edge; on a name a waiver drops, a ``waived`` edge; on any other name,
a ``host`` edge (the host provides it, protected or not).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = [
    "ROOT",
    "Edge",
    "LockGraph",
    "PackageNode",
    "TreeNode",
    "build_graph",
    "chains",
    "from_lock",
    "tree",
]

ROOT = ""  # the profile itself: the node every root edge leaves from
NodeKind = Literal["native", "locked", "host", "waived"]
EdgeKind = Literal["native", "declared", "locked", "host", "waived"]
# markers are evaluated as (marker text or None, extras in use) -> applies
Evaluate = Callable[[str | None, frozenset[str]], bool]


@attrs.frozen
class PackageNode:
    """A package of the graph: locked (with its version), the native wheel, a host package
    (``version``: the host's when known; ``protected``) or a waived name (``reason``)."""

    name: str
    kind: NodeKind
    version: str | None = None
    protected: bool = False
    reason: str | None = None

    def label(self) -> str:
        text = f"{self.name} {self.version}" if self.version else self.name
        if self.kind == "native":
            return f"{text} (native)"
        if self.kind == "host":
            return f"{text} (host{', protected' if self.protected else ''})"
        if self.kind == "waived":
            return f"{text} (waived: {self.reason})" if self.reason else f"{text} (waived)"
        return text


@attrs.frozen
class Edge:
    """``parent`` requires ``child`` by ``requirement`` (the Requires-Dist line, or the
    declared requirement; for the root's edge to the native wheel, ``[native]``)."""

    parent: str
    child: str
    requirement: str
    kind: EdgeKind


@attrs.frozen
class LockGraph:
    """Nodes by normalised name; each node's outgoing edges, in a stable order."""

    nodes: Mapping[str, PackageNode]
    edges: Mapping[str, tuple[Edge, ...]]

    def children(self, name: str) -> tuple[Edge, ...]:
        return self.edges.get(name, ())

    def parents(self, name: str) -> tuple[Edge, ...]:
        return tuple(e for edges in self.edges.values() for e in edges if e.child == name)

    def names(self) -> list[str]:
        return sorted(self.nodes)


@attrs.frozen
class Package:
    """What :func:`build_graph` needs of one locked package."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()
    native: bool = False


def _requirement(text: str) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def build_graph(
    packages: Sequence[Package],
    *,
    declared: Sequence[str] = (),
    evaluate: Evaluate,
    protected: Iterable[str] = (),
    waivers: Mapping[str, str] | None = None,
    host_versions: Mapping[str, str] | None = None,
) -> LockGraph:
    """The graph of ``packages`` (one of them ``native``), rooted at :data:`ROOT`: an edge to
    the native wheel and one per ``declared`` requirement (extra roots). ``waivers``: waived
    name -> reason; ``host_versions``: what the host has, when known."""
    locked = {canonicalize_name(p.name): p for p in packages}
    protected_set = {canonicalize_name(p) for p in protected}
    waived = {canonicalize_name(k): v for k, v in (waivers or {}).items()}
    host = {canonicalize_name(k): v for k, v in (host_versions or {}).items()}
    nodes: dict[str, PackageNode] = {}
    for key, package in locked.items():
        kind: NodeKind = "native" if package.native else "locked"
        nodes[key] = PackageNode(key, kind, package.version)
    edges: dict[str, list[Edge]] = {}

    def target(name: str) -> tuple[str, EdgeKind]:
        key = canonicalize_name(name)
        if key in locked:
            return key, "locked"
        if key in waived:
            nodes.setdefault(key, PackageNode(key, "waived", reason=waived[key]))
            return key, "waived"
        nodes.setdefault(
            key, PackageNode(key, "host", host.get(key), protected=key in protected_set)
        )
        return key, "host"

    def add(parent: str, child: str, requirement: str, kind: EdgeKind) -> None:
        bucket = edges.setdefault(parent, [])
        if all(e.child != child for e in bucket):
            bucket.append(Edge(parent, child, requirement, kind))

    for key, package in locked.items():
        if package.native:
            add(ROOT, key, "[native]", "native")
    for text in declared:
        req = _requirement(text)
        if req is None or not evaluate(str(req.marker) if req.marker else None, frozenset()):
            continue
        child, via = target(req.name)
        add(ROOT, child, text, "declared" if via == "locked" else via)
    for key, package in sorted(locked.items()):
        extras = frozenset(package.extras)
        named: set[str] = set()
        for text in package.requires:
            req = _requirement(text)
            if req is None:
                continue
            marker = str(req.marker) if req.marker else None
            if not evaluate(marker, extras):
                continue
            child, via = target(req.name)
            if child != key:
                add(key, child, text, via)
                named.add(child)
        for dependency in package.dependencies:  # the resolver's own edges, whatever the lines
            child = canonicalize_name(dependency)
            if child in locked and child not in named and child != key:
                add(key, child, dependency, "locked")
    ordered = {
        k: tuple(sorted(v, key=lambda e: (e.kind != "native", e.child))) for k, v in edges.items()
    }
    return LockGraph(dict(sorted(nodes.items())), ordered)


def from_lock(
    lock: Any,
    *,
    evaluate: Evaluate,
    host_versions: Mapping[str, str] | None = None,
    declared: Sequence[str] = (),
) -> LockGraph:
    """:func:`build_graph` of a read lock (:class:`kvenv.lock.pylock.LockFile`); its roots are
    the native wheel, ``declared`` (the profile's ``[overlay] requires``, which the lock does
    not repeat) and the lock's one-off ``[tool.kvenv] requires``."""
    packages = []
    for package, tool in zip(lock.pylock.packages, lock.package_tools, strict=True):
        packages.append(
            Package(
                name=str(package.name),
                version=str(package.version) if package.version is not None else "",
                requires=tuple(tool.requires) if tool is not None else (),
                extras=tuple(tool.extras) if tool is not None else (),
                dependencies=tuple(
                    str(d.get("name")) for d in package.dependencies or () if d.get("name")
                ),
                native=bool(tool is not None and tool.native),
            )
        )
    table = lock.kvenv
    if not any(p.native for p in packages):  # a lock written before the native was recorded
        packages.append(
            Package(
                table.native.name, table.native.version, tuple(table.native.requires), native=True
            )
        )
    return build_graph(
        packages,
        declared=tuple(dict.fromkeys([*declared, *table.requires])),
        evaluate=evaluate,
        protected=table.protected,
        waivers={w.name: w.reason for w in table.waivers},
        host_versions=host_versions,
    )


def chains(graph: LockGraph, name: str, *, limit: int = 1000) -> tuple[list[list[Edge]], bool]:
    """Every chain of edges from :data:`ROOT` to ``name`` (no package twice in one chain),
    shortest first (the native wheel's before declared requirements'), at most ``limit``
    (the flag: more were left out)."""
    want: str = canonicalize_name(name)
    # only walk nodes that reach ``want``: its ancestors
    reaching: set[str] = {want}
    pending: list[str] = [want]
    while pending:
        current = pending.pop()
        for edge in graph.parents(current):
            if edge.parent not in reaching:
                reaching.add(edge.parent)
                pending.append(edge.parent)
    found: list[list[Edge]] = []
    truncated = False

    def walk(node: str, path: list[Edge], seen: set[str]) -> None:
        nonlocal truncated
        if truncated:
            return
        for edge in graph.children(node):
            if edge.child not in reaching or edge.child in seen:
                continue
            if edge.child == want:
                if len(found) >= limit:
                    truncated = True
                    return
                found.append([*path, edge])
                continue
            seen.add(edge.child)
            walk(edge.child, [*path, edge], seen)
            seen.discard(edge.child)

    if ROOT in reaching:
        walk(ROOT, [], {ROOT})
    found.sort(key=lambda c: (len(c), c[0].kind != "native", [e.child for e in c]))
    return found, truncated


@attrs.frozen
class TreeNode:
    """One line of a tree: the node, the edge that led to it (None at the top), its
    children; ``repeated``: its subtree was drawn above (not drawn again)."""

    node: PackageNode
    edge: Edge | None
    children: tuple[TreeNode, ...] = ()
    repeated: bool = False
    inverted: bool = False  # ``children`` are what requires the node (``--invert``)
    roots: tuple[str, ...] = ()  # inverted: the profile's own requirements of the node

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.node.name,
            "version": self.node.version,
            "kind": self.node.kind,
        }
        if self.node.protected:
            data["protected"] = True
        if self.node.reason:
            data["reason"] = self.node.reason
        if self.edge is not None:
            data["requirement"] = self.edge.requirement
        if self.repeated:
            data["repeated"] = True
        if self.inverted:
            data["root"] = list(self.roots)
        key = "required-by" if self.inverted else "dependencies"
        data[key] = [child.to_json() for child in self.children]
        return data


def tree(graph: LockGraph, *, invert: str | None = None) -> tuple[TreeNode, ...]:
    """The graph drawn from its roots (each node's subtree once; later visits ``repeated``),
    or with ``invert`` from that node up through everything that requires it, to the roots."""
    drawn: set[str] = set()
    if invert is None:

        def down(edge: Edge, path: frozenset[str]) -> TreeNode:
            node = graph.nodes[edge.child]
            if edge.child in drawn or edge.child in path:
                return TreeNode(node, edge, repeated=True)
            drawn.add(edge.child)
            inner = path | {edge.child}
            return TreeNode(node, edge, tuple(down(e, inner) for e in graph.children(edge.child)))

        return tuple(down(edge, frozenset()) for edge in graph.children(ROOT))
    start = canonicalize_name(invert)

    def up(name: str, edge: Edge | None, path: frozenset[str]) -> TreeNode:
        node = graph.nodes[name]
        parents = sorted(graph.parents(name), key=lambda e: e.parent)
        roots = tuple(e.requirement for e in parents if e.parent == ROOT)
        if name in drawn or name in path:
            return TreeNode(node, edge, repeated=True, inverted=True, roots=roots)
        drawn.add(name)
        inner = path | {name}
        above = tuple(up(e.parent, e, inner) for e in parents if e.parent != ROOT)
        return TreeNode(node, edge, above, inverted=True, roots=roots)

    return (up(start, None, frozenset()),)
