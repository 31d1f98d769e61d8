"""Sentinel secrets never leak: an HF token (both variable names), the token a private Hub
repository demands, and a serve API key are set in the environment of every kvenv command;
every command is run in a subprocess against hermetic inputs (a loopback Hub server, real
wheels, a real checkpoint, a fake ``vllm`` executable that even prints its key), then every
byte of its output and every file under the test's directory (manifests, plans, locks, logs,
caches, bundles, activation scripts, snapshots) is searched for the sentinels.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.applyenv import REPO, locations, standard_project
from tests.support.hardening import kvenv_argv, kvenv_env
from tests.support.hubserver import HubServer, hub_server
from tests.support.paths import FAKE_VLLM

__all__ = ["hub_server"]

HF_TOKEN = "hf_SENTINELhfTOKEN7f3a9c2e1d"
HUB_TOKEN = "hf_SENTINELhubTOKEN4b8d6e0a"
API_KEY = "sk-SENTINELapiKEY9e2c7b1f5a"
SENTINELS = (HF_TOKEN, HUB_TOKEN, API_KEY)
FAKE_SERVE = FAKE_VLLM / "fake_serve.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(args: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[list[str], int, str]:
    done = subprocess.run(
        kvenv_argv(args), env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    return list(args), done.returncode, done.stdout + done.stderr


def _fake_vllm(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _leaks(text: str) -> list[str]:
    return [s for s in SENTINELS if s in text or s[3:] in text]


def test_no_command_leaks_a_secret(tmp_path: Path, hub_server: HubServer) -> None:
    project = standard_project(tmp_path / "proj", source="hf")
    hub_server.add_file(
        REPO,
        "0123456789abcdef0123456789abcdef01234567",
        project.native.name,
        project.native.read_bytes(),
    )
    hub_server.require_token(REPO, HF_TOKEN)
    where = locations(tmp_path)
    paths = ["--root", str(where.root), "--cache", str(where.cache)]
    profile = str(project.profile_path)
    ckpt = make_tp_checkpoint(tmp_path / "ckpt", 1)
    exe = _fake_vllm(tmp_path)
    env = kvenv_env(
        {
            "HF_TOKEN": HF_TOKEN,
            "HUGGING_FACE_HUB_TOKEN": HUB_TOKEN,
            "MY_API_KEY": API_KEY,
            "VLLM_API_KEY": API_KEY,
            "FAKE_VLLM_LEAK": "1",
            "FAKE_VLLM_DELAY": "0",
            "KVENV_CACHE_DIR": str(where.cache),
        }
    )
    snapshot = tmp_path / "host.json"
    serve = ["serve", str(ckpt), "--vllm", str(exe), "--no-gpu-check", "-tp", "1"]
    serve += ["--api-key-env", "MY_API_KEY", "--public"]
    independent: list[list[str]] = [
        ["--version"],
        ["profiles", "--json"],
        ["show", profile, "--json"],
        ["check", profile],
        ["schema", "profile"],
        ["fingerprint", "--json", "--save", str(snapshot)],
        ["doctor", profile, "--json"],
        ["verify-gpus", "--tensor-parallel-size", "1", "--json"],
        ["init", "mine", "--dir", str(tmp_path / "initdir")],
        ["lock", profile, "--check", "--json"],
        ["plan", profile, "--json", *paths],
        ["apply", profile, "--dry-run", "--json", *paths],
        ["verify-wheel", str(project.native), "--json"],
        ["stage-wheel", str(project.native), "--target", str(tmp_path / "staged")],
        ["inspect-shards", str(ckpt), "--verify", "--json"],
        [*serve, "--dry-run", "--json"],
        [*serve, "--dry-run"],
    ]
    after_apply: list[list[str]] = [
        ["status", profile, "--json", *paths],
        ["verify", profile, "--json", *paths],
        ["activate", profile, "--shell", "bash", *paths],
        ["activate", profile, "--shell", "json", *paths],
        ["env", profile, "--shell", "fish", *paths],
        ["plan", profile, *paths],
        ["apply", profile, "--json", *paths],
        ["bundle", profile, "-o", str(tmp_path / "bundle"), "--cache", str(where.cache)],
        ["reset", profile, "--dry-run", "--json", *paths],
    ]
    results: list[tuple[list[str], int, str]] = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        results += pool.map(lambda a: _run(a, env, tmp_path), independent)
        first = _run(["apply", profile, *paths], env, tmp_path)
        assert first[1] == 0, first[2]
        results.append(first)
        results += pool.map(lambda a: _run(a, env, tmp_path), after_apply)
    failing = dict(env, FAKE_VLLM_MODE="exit")
    log = tmp_path / "logs" / "serve.log"
    log.parent.mkdir()
    port = str(_free_port())
    results.append(_run([*serve, "--port", port, "--wait", "--log", str(log)], failing, tmp_path))
    wrong = dict(env, HF_TOKEN="hf_SENTINELwrongTOKEN00000000")
    results.append(_run(["apply", profile, *paths, "--offline"], wrong, tmp_path))
    hub_server.require_token(REPO, "someone-else's")
    results.append(
        _run(["bundle", profile, "-o", str(tmp_path / "b2"), "--jobs", "1"], env, tmp_path)
    )
    results.append(_run(["reset", profile, "--yes", *paths], env, tmp_path))
    crashed = [(args, text) for args, code, text in results if "Traceback" in text]
    assert not crashed, crashed
    leaked = [(args, _leaks(text)) for args, _, text in results if _leaks(text)]
    assert not leaked, leaked
    assert results[-1][1] == 0, results[-1]
    files = 0
    for current, dirs, names in os.walk(tmp_path):
        if current == str(tmp_path):
            dirs.remove("logs")  # the server's own log: see test_serve_log_is_redacted
        for name in names:
            path = Path(current, name)
            if path.is_symlink() or not path.is_file():
                continue
            files += 1
            data = path.read_bytes()
            found = [s for s in SENTINELS if s.encode() in data or s[3:].encode() in data]
            assert not found, f"{path} contains {found}"
    assert files > 20
    assert hub_server.count("GET") >= 1 and any(s.had_auth for s in hub_server.requests)


def test_serve_log_is_redacted(tmp_path: Path) -> None:
    ckpt = make_tp_checkpoint(tmp_path / "ckpt", 1)
    exe = _fake_vllm(tmp_path)
    env = kvenv_env(
        {
            "MY_API_KEY": API_KEY,
            "FAKE_VLLM_LEAK": "1",
            "FAKE_VLLM_DELAY": "0",
            "FAKE_VLLM_MODE": "exit",
        }
    )
    log = tmp_path / "serve.log"
    args = ["serve", str(ckpt), "--vllm", str(exe), "--no-gpu-check", "-tp", "1", "--public"]
    args += [
        "--api-key-env",
        "MY_API_KEY",
        "--port",
        str(_free_port()),
        "--wait",
        "--log",
        str(log),
    ]
    _, code, text = _run(args, env, tmp_path)
    assert code == 1 and API_KEY not in text
    assert API_KEY not in log.read_text()
