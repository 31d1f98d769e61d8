"""The live host's identity (kvenv.probe.hostmemo): a probe's reads replayed against the live
machine, equal only while nothing the probe read changed: a distribution installed into or
removed from the host's import path, a variable the probe reads, a file it reads, a program's
binary, another interpreter."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from kvenv.probe import hostmemo
from kvenv.probe.effects import Effects, RunResult, live
from kvenv.probe.host import watch_probe


def _probe(monkeypatch: pytest.MonkeyPatch, extra: Path) -> dict[str, Any]:
    monkeypatch.syspath_prepend(str(extra))
    snapshot, identity = watch_probe(None)
    assert identity is not None
    assert snapshot.python.executable == sys.executable
    return identity


def test_unchanged_host_is_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    identity = _probe(monkeypatch, tmp_path)
    assert hostmemo.host_unchanged(identity)
    kinds = {read[0] for read in identity["reads"]}
    assert {"bytes", "env", "stat", "interpreter"} <= kinds  # the kernel release, CUDA variables


def test_a_distribution_installed_or_removed_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = _probe(monkeypatch, tmp_path)
    dist = tmp_path / "extra_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-pkg\nVersion: 1.0\n")
    assert not hostmemo.host_unchanged(identity)
    again = watch_probe(None)[1]
    assert again is not None and hostmemo.host_unchanged(again)
    names = {d.name for d in watch_probe(None)[0].distributions}
    assert "extra-pkg" in names  # the probe itself sees it, so the verdict must be redone
    for child in dist.iterdir():
        child.unlink()
    dist.rmdir()
    assert not hostmemo.host_unchanged(again)


def test_a_variable_the_probe_reads_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    identity = _probe(monkeypatch, tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert not hostmemo.host_unchanged(identity)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert hostmemo.host_unchanged(identity)
    monkeypatch.setenv("SOME_UNREAD_VARIABLE_FOR_THIS_TEST", "x")
    assert hostmemo.host_unchanged(identity)  # not read by the probe: no matter


def test_a_secret_value_change_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe masks secret-looking values; which values those are is part of the host."""
    monkeypatch.setenv("HF_TOKEN", "hf_" + "a" * 30)
    identity = _probe(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "b" * 30)
    assert not hostmemo.host_unchanged(identity)


def test_another_interpreter_is_another_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = _probe(monkeypatch, tmp_path)
    (head,) = [read for read in identity["reads"] if read[0] == "interpreter"]
    head[1] = str(tmp_path / "python")
    assert not hostmemo.host_unchanged(identity)


def _recorded(files: dict[str, str], commands: dict[str, RunResult], reads: list[Any]) -> Effects:
    return hostmemo.watched(Effects.recorded(files=files, commands=commands), reads)


def test_every_kind_of_read_is_replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read kind: recorded from one machine, replayed against the live one."""
    text = tmp_path / "version.txt"
    text.write_text("one")
    reads: list[Any] = []
    fx = hostmemo.watched(live(), reads)
    assert fx.read_text(str(text)) == "one"
    assert fx.exists(str(tmp_path / "absent")) is False
    assert fx.is_dir(str(tmp_path)) is True
    fx.which("definitely-not-a-program-kvenv")
    fx.environ.get("KVENV_TEST_HOSTMEMO")
    assert all(hostmemo._replay(read) for read in reads)
    text.write_text("two")
    assert not hostmemo._replay(reads[0])
    (tmp_path / "absent").mkdir()
    assert not hostmemo._replay(reads[1])
    monkeypatch.setenv("KVENV_TEST_HOSTMEMO", "set")
    assert not hostmemo._replay(reads[4])


def test_a_program_is_asked_again_unless_its_answer_is_a_file(tmp_path: Path) -> None:
    reads: list[Any] = []
    fx = _recorded({}, {"nvidia-smi -L": RunResult(0, "GPU 0: X")}, reads)
    fx.run(["/usr/bin/nvidia-smi", "-L"], 1.0)
    assert reads[-1][0] == "run"  # replayed by running it: GPUs change without a file
    ldconfig = tmp_path / "ldconfig"
    ldconfig.write_text("#!/bin/sh\n")
    reads.clear()
    fx = _recorded({}, {"ldconfig -p": RunResult(0, "")}, reads)
    fx.run([str(ldconfig), "-p"], 1.0)
    assert [(r[0], r[1]) for r in reads] == [("stat", str(ldconfig)), ("stat", "/etc/ld.so.cache")]
    assert all(hostmemo._replay(read) for read in reads)
    ldconfig.write_text("#!/bin/sh\necho changed\n")
    assert not hostmemo._replay(reads[0])  # its binary changed (with /etc/ld.so.cache)


def test_unknown_read_kinds_are_unsure() -> None:
    assert not hostmemo._replay(["from-a-newer-kvenv", None, None])
    assert not hostmemo.host_unchanged({"python": None})
