"""The memo is the one place a remembered answer is kept (issue 27): its record kinds are
:data:`kvenv._util.memo.KINDS`, and no other module of kvenv names a versioned record directory
(a string like ``"name-v1"``) of its own, unless it is an integrity or transport layout listed
below with its reason. A new ad-hoc record format fails here, naming its file and line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kvenv._util import memo
from tests.support.paths import REPO

# A string that names a versioned record directory.
VERSIONED = re.compile(r"^[a-z][a-z0-9-]*-v\d+$")
MEMO_MODULE = "kvenv/_util/memo.py"

# Integrity and transport layouts: content-addressed or kept by HTTP validators, never stale by
# construction, so not memos (docs/architecture.md, "Memo and integrity").
ALLOWED: dict[str, str] = {
    "artifacts-v1": "fetch/cache.py: verified artifacts, content-addressed by sha256 (integrity); "
    "cache verify/prune/clean, reset and placecheck name the same directory",
    "pages-v1": "lock/cache.py: index pages by URL, revalidated with their HTTP validators",
    "metadata-v1": "lock/cache.py: wheel metadata by the wheel's sha256 (content-addressed)",
    "digests-v1": "lock/cache.py: a wheel file's sha256, by the file's URL (an immutable file)",
    "linkage-v1": "lock/cache.py: a wheel's ELF linkage by the wheel's sha256 (content-addressed)",
    "parsed-v1": "lock/cache.py: a page's target wheels, by the sha256 of the page's bytes",
    # Not directories at all: the x86-64 psABI microarchitecture levels (model/cpuisa.py).
    "x86-64-v1": "model/cpuisa.py: a psABI level's name, not a record directory",
    "x86-64-v2": "model/cpuisa.py: a psABI level's name, not a record directory",
    "x86-64-v3": "model/cpuisa.py: a psABI level's name, not a record directory",
    "x86-64-v4": "model/cpuisa.py: a psABI level's name, not a record directory",
}


def versioned_names(root: Path) -> list[tuple[str, int, str]]:
    """Every string constant under ``root/kvenv`` (the memo module aside) that names a
    versioned record directory: (file, line, string)."""
    found: list[tuple[str, int, str]] = []
    for path in sorted((root / "kvenv").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == MEMO_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and VERSIONED.match(node.value)
            ):
                found.append((rel, node.lineno, node.value))
    return sorted(found)


def ad_hoc_records(root: Path, allowed: frozenset[str] = frozenset(ALLOWED)) -> list[str]:
    """Each versioned record directory named outside the memo and not allowed, as
    ``file:line: message``."""
    return [
        f"{rel}:{line}: {name!r} names a record directory of its own: keep the record in the "
        f"memo (a kind in kvenv._util.memo.KINDS), or, if it is integrity or transport (content-"
        "addressed, never stale), add it to ALLOWED in tests/unit/test_memo_kinds.py with why"
        for rel, line, name in versioned_names(root)
        if name not in allowed
    ]


def test_no_record_directory_outside_the_memo() -> None:
    problems = ad_hoc_records(REPO)
    assert problems == [], "\n" + "\n".join(problems)


def test_the_memo_kinds_are_named_and_bounded() -> None:
    assert memo.KINDS, "the memo has no kinds"
    for kind, keep in memo.KINDS.items():
        assert re.fullmatch(r"[a-z][a-z0-9-]*", kind), f"{kind!r}: a kind is a plain name"
        assert not VERSIONED.match(kind), f"{kind!r}: the memo's layout carries the version"
        assert isinstance(keep, int) and keep > 0, f"{kind!r}: keeps {keep!r} records"
    assert VERSIONED.match(memo.LAYOUT), memo.LAYOUT


def test_every_allowed_layout_is_still_named_somewhere() -> None:
    named = {name for _, _, name in versioned_names(REPO)}
    assert set(ALLOWED) - named == set(), "ALLOWED names layouts no module uses: remove them"


# ------------------------------------------------------------------- controls: synthetic trees


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_control_a_new_versioned_directory_is_named_with_file_and_line(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "kvenv/__init__.py": "",
            "kvenv/_util/memo.py": 'LAYOUT = "memo-v1"\n',
            "kvenv/fetch/cache.py": 'DIR = "artifacts-v1"\n',
            "kvenv/env/thing.py": (
                'import os\n\ndef f(root):\n    return os.path.join(root, "foo-v1")\n'
            ),
        },
    )
    assert ad_hoc_records(root) == [
        "kvenv/env/thing.py:4: 'foo-v1' names a record directory of its own: keep the record "
        "in the memo (a kind in kvenv._util.memo.KINDS), or, if it is integrity or transport "
        "(content-addressed, never stale), add it to ALLOWED in tests/unit/test_memo_kinds.py "
        "with why"
    ]


def test_control_a_name_passes_only_while_allowed(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"kvenv/lock/quick.py": 'DIR = "lock-checks-v1"\n'})
    assert ad_hoc_records(root, frozenset(ALLOWED) | {"lock-checks-v1"}) == []
    assert [p.split(": ")[0] for p in ad_hoc_records(root)] == ["kvenv/lock/quick.py:1"]
    assert [p.split(": ")[0] for p in ad_hoc_records(root, frozenset(ALLOWED))] == [
        "kvenv/lock/quick.py:1"
    ]
