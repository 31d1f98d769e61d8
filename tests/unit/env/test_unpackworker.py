"""Wheels unpacked into the store by worker processes (:mod:`kvenv.env.unpackworker`): the same
entries as in process, the same errors, progress heard, a worker that dies fails its wheel
cleanly, one that cannot start falls back to threads, and workers die with their parent."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from kvenv.env import store, unpackworker
from kvenv.env.seal import seal_problem
from kvenv.env.store import Unpacker, lookup, unpack, unpack_all
from kvenv.env.unpackworker import Workers
from kvenv.errors import InstallError, IntegrityError, KvenvError, Problem
from tests.support.applyenv import helper_wheel, sha256_of
from tests.support.wheels import build_wheel

pytestmark = pytest.mark.skipif(not unpackworker.available(), reason="workers need Linux")


def _wheels(directory: Path, count: int = 4) -> dict[str, Path]:
    """``count`` wheels of several files each, one of them over the worker threshold."""
    out = {}
    rng = random.Random(7)
    for n in range(count):
        files: dict[str, bytes | str] = {f"pkg{n}/__init__.py": f"N = {n}\n"}
        files.update({f"pkg{n}/mod{i}.py": f"X = {i}\n" * (i + 1) for i in range(20)})
        files[f"pkg{n}/blob.bin"] = rng.randbytes((300 << 10) if n == 0 else 1000)
        wheel = build_wheel(directory / str(n), f"pkg{n}", "1.0", files=files)
        out[sha256_of(wheel)] = wheel
    return out


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.name.startswith(".kvenv-")  # the marker and the seal
    }


@pytest.fixture
def every_wheel_in_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unpackworker, "WORKER_MIN_BYTES", 0)


def test_workers_make_the_entries_threads_make(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path / "w")
    by_workers = unpack_all(tmp_path / "a", wheels, jobs=2)
    in_process = {sha: unpack(tmp_path / "b", sha, wheel) for sha, wheel in wheels.items()}
    assert list(by_workers) == list(wheels)
    for sha, entry in by_workers.items():
        assert entry.dist == in_process[sha].dist
        assert _tree(entry.path) == _tree(in_process[sha].path)
        assert seal_problem(entry.path) is None
        assert lookup(tmp_path / "a", sha) == entry


def test_the_large_wheel_goes_to_a_worker_the_small_ones_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    real = Workers.unpack

    def spy(self: Workers, store_: Path, sha256: str, wheel: Path, **kw: Any) -> bool:
        sent.append(wheel.name)
        return real(self, store_, sha256, wheel, **kw)

    monkeypatch.setattr(Workers, "unpack", spy)
    wheels = _wheels(tmp_path / "w")
    unpack_all(tmp_path / "s", wheels, jobs=2)
    assert sent == ["pkg0-1.0-py3-none-any.whl"]
    sent.clear()
    unpack_all(tmp_path / "t", wheels, jobs=1)  # one CPU's worth of jobs: no worker
    assert sent == []


@pytest.mark.usefixtures("every_wheel_in_a_worker")
def test_an_unsafe_wheel_fails_in_a_worker_as_in_process(tmp_path: Path) -> None:
    bad = build_wheel(tmp_path / "w", "bad", "1", raw_entries={"../x": b"x"})
    with pytest.raises(IntegrityError) as here:
        unpack(tmp_path / "a", sha256_of(bad), bad)
    with pytest.raises(IntegrityError) as there:
        unpack_all(tmp_path / "b", {sha256_of(bad): bad, **_wheels(tmp_path / "ok", 1)}, jobs=2)
    assert there.value.render() == here.value.render()
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.startswith(".tmp")]


@pytest.mark.usefixtures("every_wheel_in_a_worker")
def test_the_pipeline_uses_workers_and_hears_their_progress(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path / "w")
    heard: dict[str, tuple[int, int | None]] = {}
    unpacker = Unpacker(
        tmp_path / "s",
        jobs=2,
        progress=lambda label, done, total: heard.__setitem__(label, (done, total)),
    )
    try:
        for sha, wheel in wheels.items():
            unpacker.submit(sha, wheel)
        entries = unpacker.results(wheels)
    finally:
        unpacker.close()
    assert set(entries) == set(wheels)
    assert heard and all(done == total for done, total in heard.values())


def test_errors_cross_as_data() -> None:
    error = IntegrityError(
        "bad wheel", problems=[Problem("m", file="f", path="$.a", fix="run {kvenv lock}")], hint="h"
    )
    back = unpackworker.error_from_data(unpackworker.error_to_data(error), Path("x.whl"))
    assert type(back) is IntegrityError and back.render() == error.render()
    full = unpackworker.error_from_data(
        unpackworker.error_to_data(OSError(28, "No space left on device", "/s/f")), Path("x.whl")
    )
    assert isinstance(full, OSError) and full.errno == 28 and full.filename == "/s/f"
    other = unpackworker.error_from_data(
        unpackworker.error_to_data(ValueError("odd")), Path("x.whl")
    )
    assert isinstance(other, InstallError) and "ValueError: odd" in other.message


def test_a_worker_that_dies_fails_its_wheel_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dying = (
        "import sys; sys.stdout.write('{\"ready\": true}\\n'); sys.stdout.flush(); "
        "sys.stdin.readline(); sys.stderr.write('Killed by the test\\n'); sys.exit(9)"
    )
    monkeypatch.setattr(unpackworker, "_BOOT", dying)
    wheel = helper_wheel(tmp_path / "w")
    workers = Workers()
    try:
        with pytest.raises(InstallError) as failed:
            workers.unpack(
                tmp_path / "s", sha256_of(wheel), wheel,
                protected=(), record_waivers=(), jobs=1, progress=None,
            )  # fmt: skip
    finally:
        workers.close()
    assert "stopped before it finished (Killed by the test)" in failed.value.message
    assert "--jobs 1" in (failed.value.hint or "")


def test_a_worker_that_cannot_start_leaves_the_unpack_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unpackworker, "_BOOT", "raise SystemExit('no kvenv here')")
    monkeypatch.setattr(unpackworker, "WORKER_MIN_BYTES", 0)
    wheels = _wheels(tmp_path / "w", 2)
    entries = unpack_all(tmp_path / "s", wheels, jobs=2)
    assert all(lookup(tmp_path / "s", sha) == entry for sha, entry in entries.items())


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    """A SIGKILLed apply leaves no worker writing into the store behind it."""
    wheel = helper_wheel(tmp_path / "w")
    parent = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from kvenv.env.unpackworker import Workers
        workers = Workers()
        workers.unpack(Path({str(tmp_path / "s")!r}), {sha256_of(wheel)!r}, Path({str(wheel)!r}),
                       protected=(), record_waivers=(), jobs=1, progress=None)
        holder = os.fork()  # keeps the worker's input open: no end of input tells it
        if holder == 0:
            time.sleep(600)
        print(workers._local.proc.pid, holder, flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    worker, holder = map(int, proc.stdout.readline().split())
    try:
        assert not _gone(worker)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for _ in range(200):  # the kernel's signal, then the reaper: waited for, not timed
            if _gone(worker):
                break
            time.sleep(0.05)
        assert _gone(worker)
    finally:
        os.kill(holder, signal.SIGKILL)
    assert json.loads((tmp_path / "s" / sha256_of(wheel) / store.MARKER).read_text())


def test_kvenv_errors_keep_their_class(tmp_path: Path) -> None:
    for cls in (InstallError, IntegrityError, KvenvError):
        back = unpackworker.error_from_data(unpackworker.error_to_data(cls("x")), Path("w.whl"))
        assert type(back) is cls
