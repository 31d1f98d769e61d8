"""``kvenv cluster apply --offline`` (issue 26): parsed like ``kvenv apply --offline`` and
carried to every node's apply, which then downloads nothing. Runs a node's task directly, in
this process (no Ray needed: ``run_node`` is what each node's Ray task calls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.cli import build_parser
from kvenv.cli.cluster import cluster_options
from kvenv.cluster.driver import _spec
from kvenv.cluster.ops import NodeSpec, run_node
from tests.support.applyenv import standard_project


def test_cluster_apply_accepts_offline_and_carries_it_to_the_nodes() -> None:
    parser = build_parser("cluster")
    args = parser.parse_args(["cluster", "apply", "demo", "--address", "h:1", "--offline"])
    options = cluster_options(args)
    assert options.offline is True
    assert _spec("apply", options, ray=None).offline is True
    plain = cluster_options(parser.parse_args(["cluster", "apply", "--address", "h:1"]))
    assert plain.offline is False and _spec("apply", plain, ray=None).offline is False


def test_only_apply_takes_offline() -> None:
    parser = build_parser("cluster")
    with pytest.raises(Exception, match="unrecognized arguments: --offline"):
        parser.parse_args(["cluster", "verify", "--address", "h:1", "--offline"])


def test_an_offline_node_apply_downloads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the native wheel comes from the Hub and is not cached: offline, the node must refuse
    # to download it (no endpoint answers here: a download attempt would fail otherwise)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    project = standard_project(tmp_path / "proj", source="hf")
    root, cache = tmp_path / "root", tmp_path / "cache"
    spec = NodeSpec(
        action="apply",
        profile=str(project.profile_path),
        root=str(root),
        cache=str(cache),
        offline=True,
    )
    result = run_node(spec)
    assert result.verdict == "error"
    text = result.detail or ""
    assert "not in the cache and --offline forbids downloads" in text, result
    assert not (root / "current.json").exists()
