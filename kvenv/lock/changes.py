"""What changed between two locks: packages added, removed and updated (old -> new), the
native pin, and the host packages the lock relies on (which moved, which it now relies on or
no longer does). A pure function of two lock documents (parsed TOML), so ``kvenv lock`` and
``kvenv diff OLD NEW`` say the same thing, as text (uv's wording: ``Updated tqdm v4.66.0 ->
v4.70.1``), JSON and a Markdown table for a pull request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

_SEPARATORS = re.compile(r"[-_.]+")


def _key(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


@attrs.frozen
class Moved:
    """One package in both documents at another version (``old`` -> ``new``)."""

    name: str
    old: str
    new: str


@attrs.frozen
class Present:
    """One package in one document only, at ``version`` ("" when it has none)."""

    name: str
    version: str


@attrs.frozen
class Changes:
    """The difference between two locks (every list sorted by name)."""

    added: tuple[Present, ...] = ()
    removed: tuple[Present, ...] = ()
    updated: tuple[Moved, ...] = ()
    native: Moved | None = None  # the native pin ("" old: new; "" new: gone)
    host_moved: tuple[Moved, ...] = ()  # host packages relied on, at another version
    host_added: tuple[Present, ...] = ()  # host packages the new lock relies on, the old not
    host_removed: tuple[Present, ...] = ()  # and the other way round
    host_snapshot: bool = False  # the host snapshot digest differs
    # the host's version of each package the new lock's overlay shadows (for the wording)
    shadowed: tuple[Present, ...] = attrs.field(default=(), eq=False)

    @property
    def empty(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.updated
            or self.native
            or self.host_moved
            or self.host_added
            or self.host_removed
            or self.host_snapshot
        )

    def to_json(self) -> dict[str, Any]:
        def present(items: tuple[Present, ...]) -> list[dict[str, str]]:
            return [{"name": p.name, "version": p.version} for p in items]

        def moved(items: tuple[Moved, ...]) -> list[dict[str, str]]:
            return [{"name": m.name, "old": m.old, "new": m.new} for m in items]

        return {
            "added": present(self.added),
            "removed": present(self.removed),
            "updated": moved(self.updated),
            "native": moved((self.native,))[0] if self.native is not None else None,
            "host": {
                "moved": moved(self.host_moved),
                "added": present(self.host_added),
                "removed": present(self.host_removed),
                "snapshot-changed": self.host_snapshot,
                "shadowed": present(self.shadowed),
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Changes:
        """The record :meth:`to_json` gave (what a kept lock result holds)."""

        def present(items: Any) -> tuple[Present, ...]:
            return tuple(Present(i["name"], i["version"]) for i in items or [])

        def moved(items: Any) -> tuple[Moved, ...]:
            return tuple(Moved(i["name"], i["old"], i["new"]) for i in items or [])

        host = data.get("host") or {}
        native = data.get("native")
        return cls(
            present(data.get("added")),
            present(data.get("removed")),
            moved(data.get("updated")),
            moved([native])[0] if native else None,
            moved(host.get("moved")),
            present(host.get("added")),
            present(host.get("removed")),
            bool(host.get("snapshot-changed")),
            present(host.get("shadowed")),
        )


def _packages(document: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
    """The overlay's packages (the native wheel's entry left out): key -> (name, version)."""
    out: dict[str, tuple[str, str]] = {}
    for package in (document or {}).get("packages") or []:
        if not isinstance(package, Mapping) or not isinstance(package.get("name"), str):
            continue
        tool = package.get("tool", {})
        kvenv = tool.get("kvenv", {}) if isinstance(tool, Mapping) else {}
        if isinstance(kvenv, Mapping) and kvenv.get("native") is True:
            continue
        version = package.get("version")
        out[_key(package["name"])] = (package["name"], str(version) if version else "")
    return out


def _table(document: Mapping[str, Any] | None) -> Mapping[str, Any]:
    tool = (document or {}).get("tool", {})
    table = tool.get("kvenv", {}) if isinstance(tool, Mapping) else {}
    return table if isinstance(table, Mapping) else {}


def _native(document: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    entry = _table(document).get("native")
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        return None
    return entry["name"], str(entry.get("version", "")), str(entry.get("sha256", ""))


def _relied(document: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
    """``relies-on``: key -> (name, version or "")."""
    out: dict[str, tuple[str, str]] = {}
    for line in _table(document).get("relies-on") or []:
        if isinstance(line, str) and line:
            name, _, version = line.partition("==")
            out[_key(name)] = (name, version)
    return out


def _compare(
    old: dict[str, tuple[str, str]], new: dict[str, tuple[str, str]]
) -> tuple[tuple[Present, ...], tuple[Present, ...], tuple[Moved, ...]]:
    added = tuple(Present(*new[k]) for k in sorted(new.keys() - old.keys()))
    removed = tuple(Present(*old[k]) for k in sorted(old.keys() - new.keys()))
    updated = tuple(
        Moved(new[k][0], old[k][1], new[k][1])
        for k in sorted(old.keys() & new.keys())
        if old[k][1] != new[k][1]
    )
    return added, removed, updated


def lock_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> Changes:
    """What changed from lock document ``old`` (None: there was no lock) to ``new``."""
    added, removed, updated = _compare(_packages(old), _packages(new))
    was, now = _native(old), _native(new)
    native = None
    if was != now and now is not None:
        before, after = (was[1] if was is not None else ""), now[1]
        if was is not None and was[1] == now[1]:  # the same version, other bytes
            before, after = f"{was[1]} (sha256 {was[2][:12]})", f"{now[1]} (sha256 {now[2][:12]})"
        native = Moved(now[0], before, after)
    elif was is not None and now is None:
        native = Moved(was[0], was[1], "")
    host_added, host_removed, host_moved = _compare(_relied(old), _relied(new))
    if (
        old is not None
        and "relies-on" not in _table(old)
        and _table(old).get("host-snapshot-digest")
    ):  # made before kvenv recorded what it relies on: nothing known to compare with
        host_added = host_removed = host_moved = ()
    snapshot = old is not None and _table(old).get("host-snapshot-digest") != _table(new).get(
        "host-snapshot-digest"
    )
    shadowed = tuple(
        Present(str(s["name"]), str(s["host-version"]))
        for s in _table(new).get("shadows") or []
        if isinstance(s, Mapping) and "name" in s and "host-version" in s
    )
    return Changes(
        added,
        removed,
        updated,
        native,
        host_moved,
        host_added,
        host_removed,
        bool(snapshot),
        shadowed,
    )


def _v(version: str) -> str:
    return f"v{version}" if version else "(no version)"


def text_lines(changes: Changes) -> list[str]:
    """One line per change, uv's wording: ``Updated tqdm v4.66.0 -> v4.70.1``, ``Added rich
    v13.7.1``, ``Removed foo v1.0``; the native pin and the host after the overlay."""
    host_new = {_key(p.name): p.version for p in changes.host_added}
    host_old = {_key(p.name): p.version for p in changes.host_removed}
    host_now = {
        **host_new,
        **{_key(m.name): m.new for m in changes.host_moved},
    }
    lines: list[str] = []
    shadows = {_key(p.name): p.version for p in changes.shadowed}
    for item in changes.added:
        why = ""
        if _key(item.name) in host_old:
            why = f" (the lock relied on the host's {_v(host_old[_key(item.name)])}"
            if _key(item.name) in shadows:
                why += f"; the host has {_v(shadows[_key(item.name)])} now"
            why += ")"
        lines.append(f"Added {item.name} {_v(item.version)}{why}")
    for item in changes.removed:
        why = ""
        if _key(item.name) in host_now:
            why = f" (the host's {_v(host_now[_key(item.name)])} is used now)"
        lines.append(f"Removed {item.name} {_v(item.version)}{why}")
    lines.extend(f"Updated {m.name} {_v(m.old)} -> {_v(m.new)}" for m in changes.updated)
    if changes.native is not None:
        native = changes.native
        if not native.new:
            lines.append(f"Native {native.name} {_v(native.old)} removed")
        elif not native.old:
            lines.append(f"Added native {native.name} {_v(native.new)}")
        else:
            lines.append(f"Native {native.name} {_v(native.old)} -> {_v(native.new)}")
    lines.extend(f"Host {m.name} {_v(m.old)} -> {_v(m.new)}" for m in changes.host_moved)
    lines.extend(f"Host {p.name} {_v(p.version)} relied on" for p in changes.host_added)
    lines.extend(f"Host {p.name} {_v(p.version)} no longer relied on" for p in changes.host_removed)
    if changes.host_snapshot and not (
        changes.host_moved or changes.host_added or changes.host_removed
    ):
        lines.append("Host snapshot changed (no package the lock relies on moved)")
    return lines


def markdown(changes: Changes, *, title: str = "Lock changes") -> str:
    """A Markdown table of ``changes`` (a bot can post it on a pull request)."""
    if changes.empty:
        return f"### {title}\n\nNo changes.\n"
    rows = ["| Change | Package | Old | New |", "|---|---|---|---|"]
    rows.extend(f"| added | {p.name} | | {p.version} |" for p in changes.added)
    rows.extend(f"| removed | {p.name} | {p.version} | |" for p in changes.removed)
    rows.extend(f"| updated | {m.name} | {m.old} | {m.new} |" for m in changes.updated)
    if changes.native is not None:
        native = changes.native
        rows.append(f"| native | {native.name} | {native.old} | {native.new} |")
    rows.extend(f"| host moved | {m.name} | {m.old} | {m.new} |" for m in changes.host_moved)
    rows.extend(f"| host relied on | {p.name} | | {p.version} |" for p in changes.host_added)
    rows.extend(
        f"| host no longer relied on | {p.name} | {p.version} | |" for p in changes.host_removed
    )
    if changes.host_snapshot:
        rows.append("| host snapshot | | | changed |")
    return f"### {title}\n\n" + "\n".join(rows) + "\n"
