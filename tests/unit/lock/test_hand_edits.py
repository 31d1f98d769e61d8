"""A lock knows when it was edited (issue 36): ``kvenv lock --check`` fails (exit 1) on any hand
edit of what the lock says, naming the first difference by its ``$.path`` and the fix; the
sha256 an index publishes is held against the lock where kvenv's page cache has the page; a
passed check kept in the memo never hides an edit; a relock by another kvenv that says the
same leaves the file as it is."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kvenv.lock.pylock
from kvenv._util import tomlio
from kvenv.cli import main
from kvenv.lock import digest
from kvenv.lock.pylock import HEADER, dumps_lock
from tests.support.lockenv import HOST_TORCH, basic_house, serve_index, write_project

LOCK = Path("locks/pylock.testbox.toml")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project locked from a find-links house, as kvenv wrote it; the project dir."""
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    basic_house(root / "house")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    return root


def _check(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["lock", "testbox", "--check", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def _index_of(doc: dict[str, Any], name: str) -> int:
    return next(i for i, p in enumerate(doc["packages"]) if p["name"] == name)


def _edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Edit the lock as data (its text rewritten, not restamped); the document as it was."""
    doc = tomlio.loads(LOCK.read_text(), file=str(LOCK))
    edited = tomlio.loads(LOCK.read_text(), file=str(LOCK))
    change(edited)
    LOCK.write_text(HEADER + tomlio.dumps(edited))
    return doc


def test_a_lock_kvenv_wrote_passes_and_records_its_digests(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tomlio.loads(LOCK.read_text(), file=str(LOCK))
    tool = doc["tool"]["kvenv"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", tool["content-digest"])
    assert tool["kvenv-version"] == kvenv.lock.pylock.__version__
    assert all(
        re.fullmatch(r"([0-9a-f]{4})+", p["tool"]["kvenv"]["digest"]) for p in doc["packages"]
    )
    assert digest.first_edit(doc) is None
    code, report = _check(capsys)
    assert (code, report["ok"]) == (0, True)


def test_comments_and_layout_are_not_content(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = LOCK.read_text().replace("\n[[packages]]\n", "\n# reviewed\n\n[[packages]]\n", 1)
    LOCK.write_text(text)
    assert _check(capsys)[0] == 0


def _sha256(doc: dict[str, Any]) -> str:
    doc["packages"][_index_of(doc, "beta")]["wheels"][0]["hashes"]["sha256"] = "0" * 64
    return f"$.packages[{_index_of(doc, 'beta')}].wheels[0].hashes.sha256"


def _size(doc: dict[str, Any]) -> str:
    doc["packages"][_index_of(doc, "alpha")]["wheels"][0]["size"] += 1
    return f"$.packages[{_index_of(doc, 'alpha')}].wheels[0].size"


def _version(doc: dict[str, Any]) -> str:
    """A version edited with its wheel's name and path (else the pylock itself is invalid)."""
    package = doc["packages"][_index_of(doc, "delta")]
    package["version"] = "1.5.1"
    for key in ("name", "path"):
        package["wheels"][0][key] = package["wheels"][0][key].replace("1.5.0", "1.5.1")
    return f"$.packages[{_index_of(doc, 'delta')}].version"


def _removed(doc: dict[str, Any]) -> str:
    index = _index_of(doc, "beta")
    del doc["packages"][index]
    return f"$.packages[{index}]"


def _removed_last(doc: dict[str, Any]) -> str:
    doc["packages"].pop()
    return f"$.packages[{len(doc['packages'])}]"


def _added(doc: dict[str, Any]) -> str:
    extra = json.loads(json.dumps(doc["packages"][_index_of(doc, "six")]))
    extra["name"], extra["version"] = "sixx", "1.0"
    for key in ("name", "path"):
        extra["wheels"][0][key] = extra["wheels"][0][key].replace("six-1.17.0", "sixx-1.0")
    del extra["tool"]["kvenv"]["digest"]
    doc["packages"].insert(1, extra)
    return "$.packages[1]"


def _tool_field(doc: dict[str, Any]) -> str:
    doc["tool"]["kvenv"]["target"] = "somewhere else"
    return "$.tool.kvenv.target"


def _header(doc: dict[str, Any]) -> str:
    doc["requires-python"] = ">=3.12"
    return "$.requires-python"


EDITS = [_sha256, _size, _version, _removed, _removed_last, _added, _tool_field, _header]


@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__.strip("_"))
def test_a_hand_edit_fails_the_check_at_its_path(
    project: Path, capsys: pytest.CaptureFixture[str], edit: Callable[[dict[str, Any]], str]
) -> None:
    where: list[str] = []
    _edit(lambda doc: where.append(edit(doc)))
    code, report = _check(capsys)
    assert code == 1
    first = report["problems"][0]
    assert first["path"] == where[0]
    assert first["message"].startswith("the lock was edited by hand")
    assert "`kvenv lock testbox`" in first["fix"]
    assert first["file"].endswith("pylock.testbox.toml")


def test_the_edit_is_caught_in_text_too(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: a size edited in the file's text, the rest left byte for byte."""
    text = LOCK.read_text()
    size = re.search(r"^size = (\d+)$", text, flags=re.MULTILINE)
    assert size is not None
    LOCK.write_text(text.replace(size.group(0), f"size = {int(size.group(1)) + 7}", 1))
    capsys.readouterr()
    assert main(["lock", "testbox", "--check"]) == 1
    said = capsys.readouterr().err
    assert "edited by hand" in said and ".wheels[0].size" in said and "kvenv lock testbox" in said


def test_a_kept_check_never_hides_an_edit(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(capsys)[0] == 0
    assert _check(capsys)[0] == 0  # answered from the record
    _edit(_sha256)
    assert _check(capsys)[0] == 1


def test_a_lock_without_a_digest_is_refused_with_the_fix(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def strip(doc: dict[str, Any]) -> None:
        for key in (digest.CONTENT_KEY, digest.HEADER_KEY, digest.WRITER_KEY):
            del doc["tool"]["kvenv"][key]

    _edit(strip)
    code, report = _check(capsys)
    assert code == 1
    assert report["problems"][0]["path"] == "$.tool.kvenv"
    assert "no content digest" in report["problems"][0]["message"]


def test_the_index_s_published_hash_is_held_against_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sha256 changed and the lock stamped again (as if kvenv wrote it): only the index's
    published hash, from the page cache, tells. Checked after the index is gone (offline)."""
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    house = basic_house(tmp_path / "house")
    monkeypatch.chdir(root)
    with serve_index(house) as url:
        assert main(["lock", "testbox", "--index-url", url]) == 0
    assert _check(capsys, "--index-url", url)[0] == 0
    doc = tomlio.loads(LOCK.read_text(), file=str(LOCK))
    where = _sha256(doc)
    LOCK.write_text(dumps_lock(doc))
    assert digest.first_edit(tomlio.loads(LOCK.read_text(), file=str(LOCK))) is None
    code, report = _check(capsys, "--index-url", url)
    assert code == 1
    (problem,) = report["problems"]
    assert problem["path"] == where
    assert "the index publishes" in problem["message"] and "0" * 64 in problem["message"]
    # without the page in the cache there is nothing to hold it against: the check passes
    for page in (Path(str(tmp_path / "cache")) / "pages-v1").rglob("*"):
        if page.is_file():
            page.unlink()
    assert _check(capsys, "--index-url", url)[0] == 0


def test_a_relock_by_another_kvenv_that_says_the_same_leaves_the_file(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = LOCK.read_bytes()
    monkeypatch.setattr(kvenv.lock.pylock, "__version__", "9.9.9")
    capsys.readouterr()
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert LOCK.read_bytes() == before
    # a lock that changes records the kvenv that wrote it
    _edit(_size)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    assert LOCK.read_bytes() != before
    assert tomlio.loads(LOCK.read_text(), file=str(LOCK))["tool"]["kvenv"]["kvenv-version"] == (
        "9.9.9"
    )
    assert _check(capsys)[0] == 0
