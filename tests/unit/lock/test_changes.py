"""kvenv.lock.changes: what changed between two lock documents, a pure function; its wording
(uv's), its JSON and its Markdown table; and properties over generated locks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvenv.lock.changes import Changes, Moved, Present, lock_changes, markdown, text_lines


def lock(
    packages: dict[str, str],
    *,
    native: tuple[str, str, str] = ("vllm", "0.18.1", "a" * 64),
    relies_on: list[str] | None = None,
    snapshot: str = "sha256:1",
) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [
        {"name": name, "version": version, "tool": {"kvenv": {"requires": []}}}
        for name, version in packages.items()
    ]
    entries.append({"name": native[0], "version": native[1], "tool": {"kvenv": {"native": True}}})
    table: dict[str, Any] = {
        "native": {"name": native[0], "version": native[1], "sha256": native[2]},
        "host-snapshot-digest": snapshot,
    }
    if relies_on is not None:
        table["relies-on"] = relies_on
    return {"lock-version": "1.0", "packages": entries, "tool": {"kvenv": table}}


def test_added_removed_updated_in_uv_words() -> None:
    old = lock({"tqdm": "4.66.0", "foo": "1.0"})
    new = lock({"tqdm": "4.70.1", "rich": "13.7.1"})
    changes = lock_changes(old, new)
    assert changes.added == (Present("rich", "13.7.1"),)
    assert changes.removed == (Present("foo", "1.0"),)
    assert changes.updated == (Moved("tqdm", "4.66.0", "4.70.1"),)
    assert text_lines(changes) == [
        "Added rich v13.7.1",
        "Removed foo v1.0",
        "Updated tqdm v4.66.0 -> v4.70.1",
    ]


def test_the_native_entry_is_not_an_overlay_package_and_its_pin_is_reported() -> None:
    old = lock({}, native=("vllm", "0.18.1", "a" * 64))
    new = lock({}, native=("vllm", "0.18.2", "b" * 64))
    changes = lock_changes(old, new)
    assert not changes.added and not changes.removed and not changes.updated
    assert changes.native == Moved("vllm", "0.18.1", "0.18.2")
    assert text_lines(changes) == ["Native vllm v0.18.1 -> v0.18.2"]
    same_version = lock_changes(old, lock({}, native=("vllm", "0.18.1", "b" * 64)))
    assert same_version.native is not None
    assert text_lines(same_version) == [
        f"Native vllm v0.18.1 (sha256 {'a' * 12}) -> v0.18.1 (sha256 {'b' * 12})"
    ]
    first = lock_changes(None, new)
    assert text_lines(first) == ["Added native vllm v0.18.2"]


def test_a_host_update_says_what_moved_and_what_the_overlay_did() -> None:
    old = lock(
        {"idna": "3.19"},
        relies_on=["numpy==2.0.2", "safetensors==0.7.0", "torch==2.10.0+cu128"],
        snapshot="sha256:old",
    )
    new = lock(
        {"numpy": "2.0.2"},
        relies_on=["idna==3.18", "safetensors==0.8.0", "torch==2.10.0+cu128"],
        snapshot="sha256:new",
    )
    new["tool"]["kvenv"]["shadows"] = [
        {"name": "numpy", "host-version": "2.1.3", "overlay-version": "2.0.2"}
    ]
    changes = lock_changes(old, new)
    assert changes.host_moved == (Moved("safetensors", "0.7.0", "0.8.0"),)
    assert changes.host_added == (Present("idna", "3.18"),)
    assert changes.host_removed == (Present("numpy", "2.0.2"),)
    assert changes.host_snapshot
    assert text_lines(changes) == [
        "Added numpy v2.0.2 (the lock relied on the host's v2.0.2; the host has v2.1.3 now)",
        "Removed idna v3.19 (the host's v3.18 is used now)",
        "Host safetensors v0.7.0 -> v0.8.0",
        "Host idna v3.18 relied on",
        "Host numpy v2.0.2 no longer relied on",
    ]
    data = changes.to_json()
    assert data["host"] == {
        "moved": [{"name": "safetensors", "old": "0.7.0", "new": "0.8.0"}],
        "added": [{"name": "idna", "version": "3.18"}],
        "removed": [{"name": "numpy", "version": "2.0.2"}],
        "snapshot-changed": True,
        "shadowed": [{"name": "numpy", "version": "2.1.3"}],
    }
    assert Changes.from_json(data) == changes
    table = markdown(changes)
    assert "| host moved | safetensors | 0.7.0 | 0.8.0 |" in table
    assert "| added | numpy | | 2.0.2 |" in table
    assert table.startswith("### Lock changes\n\n| Change | Package | Old | New |\n|---|")


def test_same_lock_is_no_change() -> None:
    doc = lock({"a": "1"}, relies_on=["b==2"])
    changes = lock_changes(doc, doc)
    assert changes.empty and text_lines(changes) == []
    assert markdown(changes) == "### Lock changes\n\nNo changes.\n"


def test_names_compare_normalised_and_garbage_is_ignored() -> None:
    old = lock({"Foo_Bar": "1.0"})
    new = lock({"foo-bar": "1.0"})
    assert lock_changes(old, new).empty
    junk: dict[str, Any] = {"packages": [1, {"version": "2"}], "tool": []}
    assert lock_changes(junk, junk).empty


_names = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps", "zeta"])
_versions = st.sampled_from(["1.0", "1.1", "2.0", "3.0rc1"])
_packages = st.dictionaries(_names, _versions, max_size=6)
_relied = st.dictionaries(st.sampled_from(["h1", "h2", "h3"]), _versions, max_size=3)


def _doc(packages: dict[str, str], relied: dict[str, str]) -> dict[str, Any]:
    return lock(packages, relies_on=[f"{n}=={v}" for n, v in relied.items()])


@given(_packages, _packages, _relied, _relied)
def test_applying_the_changes_to_old_gives_new(
    a: dict[str, str], b: dict[str, str], ha: dict[str, str], hb: dict[str, str]
) -> None:
    changes = lock_changes(_doc(a, ha), _doc(b, hb))
    got = dict(a)
    for item in changes.removed:
        assert got.pop(item.name) == item.version
    for item in changes.added:
        assert item.name not in got
        got[item.name] = item.version
    for moved in changes.updated:
        assert got[moved.name] == moved.old != moved.new
        got[moved.name] = moved.new
    assert got == b
    host = dict(ha)
    for item in changes.host_removed:
        del host[item.name]
    for item in changes.host_added:
        host[item.name] = item.version
    for moved in changes.host_moved:
        host[moved.name] = moved.new
    assert host == hb


@given(_packages, _packages, _relied, _relied)
def test_the_reverse_diff_swaps_added_and_removed(
    a: dict[str, str], b: dict[str, str], ha: dict[str, str], hb: dict[str, str]
) -> None:
    forth = lock_changes(_doc(a, ha), _doc(b, hb))
    back = lock_changes(_doc(b, hb), _doc(a, ha))
    assert forth.added == back.removed and forth.removed == back.added
    assert [(m.name, m.new, m.old) for m in forth.updated] == [
        (m.name, m.old, m.new) for m in back.updated
    ]
    assert forth.empty == back.empty == (a == b and ha == hb)
    assert len(text_lines(forth)) == len(forth.added) + len(forth.removed) + len(
        forth.updated
    ) + len(forth.host_moved) + len(forth.host_added) + len(forth.host_removed)


def test_json_round_trips_through_the_cli_printer(capsys: pytest.CaptureFixture[str]) -> None:
    """``kvenv lock --json`` and ``kvenv diff --json`` give ``Changes.to_json``; the text the
    CLI prints from that JSON is the same as from the record itself."""
    import argparse

    from kvenv.cli.lock import _print_changes

    changes = lock_changes(
        lock({"a": "1"}, relies_on=["h==1"]), lock({"a": "2", "b": "1"}, relies_on=["h==2"])
    )
    assert isinstance(changes, Changes)
    _print_changes(argparse.Namespace(format="text"), changes.to_json(), title="t")
    assert capsys.readouterr().out.splitlines() == text_lines(changes)
