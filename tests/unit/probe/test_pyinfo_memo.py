"""The host interpreter's own facts are memoized while its files are unchanged, and probed
again as soon as anything they depend on changes: a new ``.pth`` in its site-packages, its
``pyvenv.cfg``, the binary. A script (a pyenv shim) is never memoized; a damaged memo is
probed over, never an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from kvenv.probe.effects import Effects, RunResult, live
from kvenv.probe.pyinfo import remote_interpreter
from tests.support.audit import uncovered


class Counting:
    """Live effects whose ``run`` counts the probes it starts."""

    def __init__(self) -> None:
        self.runs = 0
        base = live()
        self._run = base.run
        self.effects: Effects = attrs.evolve(base, run=self.run)

    def run(self, argv: Sequence[str], timeout: float) -> RunResult | None:
        self.runs += 1
        return self._run(argv, timeout)


@pytest.fixture(scope="module")
def host_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real virtual environment (no pip): its python is a link to a native binary."""
    where = tmp_path_factory.mktemp("hostvenv") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    return where


def _site(env: Path) -> Path:
    out = subprocess.run(
        [
            str(env / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def test_unchanged_interpreter_is_probed_once(host_venv: Path, tmp_path: Path) -> None:
    python = str(host_venv / "bin" / "python")
    counting = Counting()
    first = remote_interpreter(python, counting.effects, memo=tmp_path)
    again = remote_interpreter(python, counting.effects, memo=tmp_path)
    assert counting.runs == 1
    assert again == first
    assert str(_site(host_venv)) in first.sys_path


def test_a_new_pth_file_is_seen(host_venv: Path, tmp_path: Path) -> None:
    python = str(host_venv / "bin" / "python")
    counting = Counting()
    remote_interpreter(python, counting.effects, memo=tmp_path)
    extra = tmp_path / "extra-dir"
    extra.mkdir()
    pth = _site(host_venv) / "zz_kvenv_test.pth"
    pth.write_text(f"{extra}\n")
    try:
        after = remote_interpreter(python, counting.effects, memo=tmp_path)
    finally:
        pth.unlink()
    assert counting.runs == 2
    assert str(extra) in after.sys_path


def test_an_edited_pyvenv_cfg_is_seen(host_venv: Path, tmp_path: Path) -> None:
    python = str(host_venv / "bin" / "python")
    counting = Counting()
    remote_interpreter(python, counting.effects, memo=tmp_path)
    cfg = host_venv / "pyvenv.cfg"
    text = cfg.read_text()
    cfg.write_text(
        text.replace("include-system-site-packages = false", "include-system-site-packages = true")
    )
    try:
        after = remote_interpreter(python, counting.effects, memo=tmp_path)
    finally:
        cfg.write_text(text)
    assert counting.runs == 2
    assert len(after.sys_path) > 0


def test_a_script_interpreter_is_never_memoized(tmp_path: Path) -> None:
    shim = tmp_path / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    counting = Counting()
    remote_interpreter(str(shim), counting.effects, memo=tmp_path / "memo")
    remote_interpreter(str(shim), counting.effects, memo=tmp_path / "memo")
    assert counting.runs == 2
    assert not (tmp_path / "memo").exists()


def test_a_damaged_memo_is_probed_over(host_venv: Path, tmp_path: Path) -> None:
    python = str(host_venv / "bin" / "python")
    counting = Counting()
    first = remote_interpreter(python, counting.effects, memo=tmp_path)
    (record,) = (tmp_path / "memo-v1" / "interpreter").glob("*.json")
    data = json.loads(record.read_text())
    data["value"]["sys_path"] = 3
    record.write_text(json.dumps(data))
    assert remote_interpreter(python, counting.effects, memo=tmp_path) == first
    record.write_text("not json")
    assert remote_interpreter(python, counting.effects, memo=tmp_path) == first
    assert counting.runs == 3


def test_the_record_depends_on_every_file_the_probe_answer_comes_from(
    host_venv: Path, tmp_path: Path
) -> None:
    """Completeness (tests/support/audit.py): the files the probed interpreter's facts come
    from (its binary, the binary it resolves to, its ``pyvenv.cfg``, the directories of its
    import path, listed for ``.pth`` files) are each covered by a dependency of the record. The
    child runs in another process, out of the audit hook's sight: its reads are listed here."""
    python = str(host_venv / "bin" / "python")
    found = remote_interpreter(python, live(), memo=tmp_path)
    (record,) = (tmp_path / "memo-v1" / "interpreter").glob("*.json")
    deps = json.loads(record.read_text())["deps"]
    cfg = host_venv / "pyvenv.cfg"
    reads = {("open", python), ("open", os.path.realpath(python)), ("open", str(cfg))}
    reads |= {("list", d) for d in found.sys_path}
    assert uncovered(reads, deps) == []
    site = str(_site(host_venv))
    assert uncovered(reads, [d for d in deps if d[1] != site]) == [("list", site)]
