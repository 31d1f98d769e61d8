"""Completeness of the memo kinds ``answer`` (status, a no-op apply, plan), ``generation`` and
``bundle`` (kvenv.env.answers, kvenv.fetch.bundle): each command's full path runs under an audit
hook (tests.support.audit) and every file it read is among the dependencies of the record it
kept. The recall is skipped (``verbosity`` 1) so that only the full path is audited, and the
records are kept after it, as the CLI keeps them once a command succeeded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kvenv._util import memo
from kvenv.cli import build_parser, main
from tests.support.applyenv import Project, local_project
from tests.support.audit import reads_of, uncovered


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    for name in [k for k in os.environ if k.startswith("KVENV_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KVENV_PYTHON", sys.executable)  # probed in process: its identity kept
    monkeypatch.chdir(tmp_path)
    return local_project(tmp_path / "proj")


def _places(tmp: Path, root: str = "root") -> list[str]:
    return ["--root", str(tmp / root), "--cache", str(tmp / "cache")]


def _full_path(argv: list[str]) -> set[tuple[str, str]]:
    """Run ``argv``'s full path under the audit hook; then keep its records."""
    args = build_parser(argv[0]).parse_args(argv)
    args.verbosity = 1  # no recall: the full path only
    args.on_success = []
    args.fix_command = lambda *_: "kvenv"
    code, reads = reads_of(lambda: args.func(args))
    assert code in (0, 1)
    for keep in args.on_success:
        keep()
    return reads


def _records(cache: Path, kind: str) -> list[dict[str, Any]]:
    folder = cache / memo.LAYOUT / kind
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _record(cache: Path, kind: str, command: str) -> dict[str, Any]:
    found = [r for r in _records(cache, kind) if r["key"].get("command", command) == command]
    assert len(found) == 1, found
    return found[0]


def _check(reads: set[tuple[str, str]], record: dict[str, Any], cache: Path) -> None:
    deps = record["deps"]
    missing = uncovered(reads, deps, memo_root=cache)
    assert missing == [], "\n".join(map(str, missing))
    # the harness itself can fail: without its file dependencies, reads are left uncovered
    files = [d for d in deps if d[0] in ("bytes", "stat", "listing", "tree")]
    assert uncovered(reads, [d for d in deps if d not in files], memo_root=cache) != []


def _applied(project: Project, tmp: Path) -> None:
    argv = ["apply", str(project.profile_path), *_places(tmp)]
    assert main(argv) == 0
    assert main(argv) == 0  # the profile's facts recorded, the no-op answer too


@pytest.mark.parametrize(
    "argv",
    [["status"], ["status", "--json"], ["apply"], ["plan"], ["plan", "--json"]],
    ids=lambda argv: " ".join(argv),
)
def test_an_answer_depends_on_everything_its_full_path_read(
    project: Project, tmp_path: Path, argv: list[str]
) -> None:
    _applied(project, tmp_path)
    cache = tmp_path / "cache"
    for kind in ("answer",):
        for path in (cache / memo.LAYOUT / kind).glob("*.json"):
            path.unlink()
    reads = _full_path([*argv, str(project.profile_path), *_places(tmp_path)])
    _check(reads, _record(cache, "answer", argv[0]), cache)


def test_a_plan_before_the_first_apply_depends_on_what_it_read(
    project: Project, tmp_path: Path
) -> None:
    assert main(["validate", str(project.profile_path)]) == 0
    reads = _full_path(["plan", str(project.profile_path), *_places(tmp_path)])
    cache = tmp_path / "cache"
    _check(reads, _record(cache, "answer", "plan"), cache)


def test_a_generation_depends_on_everything_its_full_path_read(
    project: Project, tmp_path: Path
) -> None:
    _applied(project, tmp_path)  # the cache and store filled, the facts recorded
    reads = _full_path(["apply", str(project.profile_path), *_places(tmp_path, "root2")])
    cache = tmp_path / "cache"
    (record,) = _records(cache, "generation")
    assert not any(str(tmp_path / "root2") in json.dumps(d) for d in record["deps"])
    _check(reads, record, cache)


def test_a_bundle_depends_on_every_file_under_it(project: Project, tmp_path: Path) -> None:
    from kvenv.fetch.bundle import open_bundle

    bundle = tmp_path / "bundle"
    assert main(["bundle", str(project.profile_path), "-o", str(bundle)]) == 0
    cache = tmp_path / "cache"
    info, reads = reads_of(lambda: open_bundle(bundle, memo_root=cache))
    (record,) = _records(cache, "bundle")
    assert record["value"] == {"profile": str(info.profile_path)}
    _check(reads, record, cache)
