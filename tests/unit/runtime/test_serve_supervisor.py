"""kvenv serve as a supervisor: a signal to ``kvenv serve`` (TERM, INT, HUP, and KILL, which
kvenv cannot catch) leaves no process of the server and closes the port; a just-stopped port
serves again at once; ``--dry-run`` refuses what the real run refuses.

The server is tests/fake_vllm/fake_serve.py in ``engine`` mode: an API server that starts an
engine core (holding the listening socket) which starts a worker, as vLLM's do."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.runtime import gpus
from kvenv.runtime.gpus import GpuCount
from kvenv.runtime.serve import http_status, serve_config, start_server
from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.paths import FAKE_VLLM, REPO

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

FAKE_SERVE = FAKE_VLLM / "fake_serve.py"
PROFILE = """\
schema = 1
name = "serve-supervisor-test"

[runtime]
tensor_parallel_size = 1
"""


@pytest.fixture
def profile(tmp_path: Path) -> str:
    path = tmp_path / "serve-supervisor-test.toml"
    path.write_text(PROFILE)
    return str(path)


@pytest.fixture
def fake_exe(tmp_path: Path) -> str:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stat_fields(pid: str) -> list[str] | None:
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return line[line.rfind(")") + 2 :].split()


def _session(sid: int) -> set[int]:
    """The running processes (zombies aside) of session ``sid``."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry.name)
        if fields is not None and fields[0] not in ("Z", "X") and fields[3] == str(sid):
            found.add(int(entry.name))
    return found


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None and fields[1] == str(pid):
                out.add(int(entry.name))
    return out


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "FAKE_VLLM"))}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        PYTHONPATH=str(REPO),
        FAKE_VLLM_MODE="engine",
        FAKE_VLLM_DELAY="0.2",
    )
    env.pop("VLLM_API_KEY", None)
    return env


def _wait_ready(port: int, process: subprocess.Popen[bytes], errors: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, errors.read_text()
        if http_status(f"http://127.0.0.1:{port}/health", timeout=1) == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"not ready: {errors.read_text()}")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL"])
def test_no_process_of_the_server_outlives_a_signal_to_kvenv(
    how: str, profile: str, fake_exe: str, tmp_path: Path
) -> None:
    port = _free_port()
    errors = tmp_path / "stderr"
    argv = [sys.executable, "-m", "kvenv", "serve", "org/model", "--profile", profile]
    argv += ["--vllm", fake_exe, "--port", str(port), "--log", str(tmp_path / "s.log")]
    argv += ["--no-gpu-check", "--stop-timeout", "5"]
    with open(tmp_path / "stdout", "wb") as output, open(errors, "wb") as error_output:
        kvenv = subprocess.Popen(
            argv, env=_env(tmp_path), stdout=output, stderr=error_output, cwd=tmp_path
        )
    sid = 0
    try:
        _wait_ready(port, kvenv, errors)
        (supervisor,) = _children(kvenv.pid)
        sid = supervisor
        deadline = time.monotonic() + 10
        while len(_session(sid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # the engine core and its worker start after the port opens
        tree = _session(sid)
        assert len(tree) == 4, tree  # supervisor, API server, engine core, worker
        assert "SIGKILL after 5 s" in errors.read_text()
        kvenv.send_signal(getattr(signal, how))
        code = kvenv.wait(timeout=30)
        deadline = time.monotonic() + 10
        while (_session(sid) or _port_open(port)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _session(sid) == set(), f"left running after {how}: {_session(sid)}"
        assert not _port_open(port)
        if how == "SIGKILL":
            assert code == -signal.SIGKILL
        else:  # the fake server exits 0 on SIGTERM, and kvenv passes its status on
            assert code == 0, errors.read_text()
            text = errors.read_text()
            assert f"kvenv: {how}: stopping the server" in text
            assert "server stopped (terminated), status 0" in text
    finally:
        if kvenv.poll() is None:
            kvenv.kill()
            kvenv.wait()
        for pid in _session(sid) if sid else ():
            os.kill(pid, signal.SIGKILL)


def test_a_server_killed_by_a_signal_gives_128_plus_n(
    profile: str, fake_exe: str, tmp_path: Path
) -> None:
    port = _free_port()
    errors = tmp_path / "stderr"
    env = _env(tmp_path)
    env["FAKE_VLLM_MODE"] = "ok"
    argv = [sys.executable, "-m", "kvenv", "serve", "org/model", "--profile", profile]
    argv += ["--vllm", fake_exe, "--port", str(port), "--log", str(tmp_path / "s.log")]
    argv.append("--no-gpu-check")
    with open(errors, "wb") as error_output:
        kvenv = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=error_output, cwd=tmp_path
        )
    try:
        _wait_ready(port, kvenv, errors)
        (supervisor,) = _children(kvenv.pid)
        (server,) = _children(supervisor)
        os.kill(server, signal.SIGKILL)  # the server dies of a signal: kvenv reports 128+9
        assert kvenv.wait(timeout=30) == 128 + signal.SIGKILL
    finally:
        if kvenv.poll() is None:
            kvenv.kill()
            kvenv.wait()


def test_a_just_stopped_port_serves_again_at_once(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(1, "test"))
    monkeypatch.setenv("FAKE_VLLM_MODE", "ok")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0")
    port = _free_port()
    config = serve_config(
        "org/model", profile=profile, executable=(sys.executable, str(FAKE_SERVE)), port=port
    )
    for round_ in range(2):
        server = start_server(config, timeout=30, log=tmp_path / f"s{round_}.log")
        try:
            for _ in range(3):  # the server closes each connection first: TIME_WAIT on the port
                with urllib.request.urlopen(f"{server.url}/v1/models", timeout=5) as answer:
                    assert answer.status == 200
        finally:
            server.stop(timeout=5)


def test_dry_run_refuses_what_the_real_run_refuses(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_exe: str
) -> None:
    checkpoint = make_tp_checkpoint(tmp_path / "ckpt", tp=2)
    base = ["serve", "--profile", profile, "--vllm", fake_exe, "--no-gpu-check"]
    port = ["--port", str(_free_port())]
    code = main([*base[:1], str(checkpoint), *base[1:], *port, "--load-format", "sharded_state"])
    assert code == 2 or code == 1, code
    assert "refusing to load the sharded checkpoint" in capsys.readouterr().err
    code = main([*base[:1], str(checkpoint), *base[1:], *port, "--load-format", "sharded_state",
                 "--dry-run"])  # fmt: skip
    assert "refusing to load the sharded checkpoint" in capsys.readouterr().err
    assert code != 0
    ok = [*base[:1], str(checkpoint), *base[1:], *port, "--load-format", "sharded_state", "-tp"]
    assert main([*ok, "2", "--dry-run"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        printed.startswith(f"{fake_exe} serve {checkpoint}")
        and "--tensor-parallel-size 2" in printed
    )
    missing = str(tmp_path / "no-such-model")
    assert main([*base[:1], missing, *base[1:], *port, "--dry-run"]) == 2
    assert f"model path {missing} does not exist" in capsys.readouterr().err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = str(busy.getsockname()[1])
        assert main([*base[:1], "org/model", *base[1:], "--port", taken, "--dry-run"]) == 2
        assert "already in use" in capsys.readouterr().err


def test_a_command_line_serve_prints_no_live_kernel_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    fake_exe: str,
) -> None:
    """serve activates the applied runtime to find vLLM for a child process: a module kvenv's
    own process imported at another version than the overlay's is no clash for it (issue 37:
    every CLI serve printed an AlreadyImportedWarning about setuptools/_distutils_hack)."""
    import types
    import warnings

    from tests.support.applyenv import (
        apply,
        fake_host_site,
        host_snapshot,
        locations,
        standard_project,
    )

    project = standard_project(tmp_path / "proj")
    apply(
        project.loaded(),
        project.lock(),
        host_snapshot(fake_host_site(tmp_path / "h")),
        locations(tmp_path),
    )
    monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    site = tmp_path / "elsewhere"
    (site / "helper").mkdir(parents=True)
    (site / "helper" / "__init__.py").write_text("")
    (site / "helper-1.5.dist-info").mkdir()
    (site / "helper-1.5.dist-info" / "METADATA").write_text("Name: helper\nVersion: 1.5\n")
    loaded = types.ModuleType("helper")
    loaded.__file__ = str(site / "helper" / "__init__.py")
    monkeypatch.setitem(sys.modules, "helper", loaded)  # the overlay has helper 2.0
    argv = ["serve", "org/model", "--profile", str(project.profile_path), "--dry-run"]
    argv += ["--vllm", fake_exe, "--no-gpu-check", "--port", str(_free_port())]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(argv) == 0
    captured = capfd.readouterr()
    assert "Warning" not in captured.err and "restart the kernel" not in captured.err
    assert os.environ.get("KVENV_ACTIVE_GENERATION")  # it did activate the runtime
