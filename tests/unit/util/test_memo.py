"""The one memo (kvenv._util.memo): a value comes back only while every dependency it was
kept with is unchanged; the recording seam notes what a full path reads; one eviction rule;
and the audit harness the completeness tests use sees a read the seam missed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvenv._util import memo, tomlio
from tests.support.audit import reads_of, uncovered


def test_a_value_holds_while_its_dependencies_do(tmp_path: Path) -> None:
    data, other = tmp_path / "data.json", tmp_path / "dir"
    data.write_text("{}")
    other.mkdir()
    deps = [memo.dep("bytes", str(data)), memo.dep("listing", str(other))]
    memo.put(tmp_path / "m", "answer", {"q": 1}, deps, {"a": [1, 2]})
    assert memo.get(tmp_path / "m", "answer", {"q": 1}) == {"a": [1, 2]}
    assert memo.get(tmp_path / "m", "answer", {"q": 2}) is None  # another key
    assert memo.get(tmp_path / "m", "generation", {"q": 1}) is None  # another kind
    (other / "new").touch()
    assert memo.get(tmp_path / "m", "answer", {"q": 1}) is None
    (other / "new").unlink()
    assert memo.get(tmp_path / "m", "answer", {"q": 1}) == {"a": [1, 2]}
    data.write_text("{ }")
    assert memo.get(tmp_path / "m", "answer", {"q": 1}) is None


def test_env_and_host_dependencies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVENV_X_TEST", "1")
    deps = [memo.dep("env", ["KVENV_*", ["KVENV_ROOT"]]), ["host", None, {"id": 1}]]
    memo.put(tmp_path, "answer", "k", deps, 1)
    assert memo.get(tmp_path, "answer", "k") is None  # a host dependency needs its checker
    assert memo.get(tmp_path, "answer", "k", host=lambda h: h == {"id": 1}) == 1
    assert memo.get(tmp_path, "answer", "k", host=lambda h: False) is None
    monkeypatch.setenv("KVENV_ROOT", "/elsewhere")  # left out
    assert memo.get(tmp_path, "answer", "k", host=lambda h: True) == 1
    monkeypatch.setenv("KVENV_X_TEST", "2")
    assert memo.get(tmp_path, "answer", "k", host=lambda h: True) is None


def test_the_seam_records_what_a_reader_parsed(tmp_path: Path) -> None:
    toml = tmp_path / "p.toml"
    toml.write_text('name = "x"\n')
    with memo.recording() as reads:
        tomlio.read(toml)
        with pytest.raises(OSError):
            memo.read_bytes(tmp_path / "absent")
    assert [d[:2] for d in reads.deps] == [
        ["bytes", str(toml)],
        ["bytes", str(tmp_path / "absent")],
    ]
    memo.put(tmp_path, "profile-facts", "k", reads.deps, "v")
    assert memo.get(tmp_path, "profile-facts", "k") == "v"
    (tmp_path / "absent").write_text("now here")
    assert memo.get(tmp_path, "profile-facts", "k") is None


def test_one_eviction_rule_and_only_known_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a memo kind"):
        memo.put(tmp_path, "my-record-v1", "k", [], 1)
    keep = memo.KINDS["lock-result"]
    for n in range(keep + 3):
        memo.put(tmp_path, "lock-result", n, [], n)
        path = memo.record_path(tmp_path, "lock-result", n)
        os.utime(path, ns=(n * 10**9, n * 10**9))
    kept = sorted(memo.get(tmp_path, "lock-result", n) for n in range(keep + 3)
                  if memo.get(tmp_path, "lock-result", n) is not None)  # fmt: skip
    assert kept == list(range(3, keep + 3))


def test_a_damaged_record_is_a_miss(tmp_path: Path) -> None:
    memo.put(tmp_path, "answer", "k", [], 1)
    memo.record_path(tmp_path, "answer", "k").write_text("{")
    assert memo.get(tmp_path, "answer", "k") is None


def test_the_audit_harness_sees_a_read_the_seam_missed(tmp_path: Path) -> None:
    seen, missed = tmp_path / "seen", tmp_path / "missed"
    seen.write_text("a")
    missed.write_text("b")

    def full_path() -> None:
        memo.read_bytes(seen)
        missed.read_bytes()  # not through the seam

    with memo.recording() as reads:
        _, found = reads_of(full_path)
    assert uncovered(found, reads.deps) == [("open", str(missed))]
