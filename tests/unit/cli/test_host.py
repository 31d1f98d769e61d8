"""The host commands end to end: in-process through ``kvenv.cli.main`` and, for the GPU probes,
in a subprocess with a fake ``nvidia-smi`` (replaying recorded outputs) on PATH."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import read_snapshot
from tests.support import hostfixtures as hf
from tests.support.jsonschema_subset import validate
from tests.support.paths import REPO
from tests.support.wheels import build_wheel, sha256_of

REPO = REPO
KAGGLE_HOST = str(REPO / "profiles" / "kaggle-t4x2-cu128.host.json")
SCHEMA = json.loads((REPO / "schemas" / "host.schema.json").read_text())
QUERY = "--query-gpu=index,uuid,name,compute_cap,memory.total --format=csv,noheader,nounits"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# fingerprint -----------------------------------------------------------------------------------


def test_fingerprint_json_and_save(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "host.json"
    code, out, err = run(capsys, "fingerprint", "--json", "--save", str(target))
    assert code == 0
    data = json.loads(out)
    assert validate(data, SCHEMA) == []
    assert data["python"]["executable"] == sys.executable
    assert read_snapshot(target).python.tags == data["python"]["tags"]
    assert f"saved: {target}" in err


def test_fingerprint_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fingerprint")
    assert code == 0
    assert out.startswith("host snapshot (probe, ")
    for label in ("python:", "platform:", "packages:", "torch:", "driver:", "CUDA:", "Kaggle:"):
        assert label in out


def test_fingerprint_of_a_missing_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "fingerprint", "--python", str(tmp_path / "python3"))
    assert code == 2
    assert "cannot run the Python interpreter" in err


# doctor ----------------------------------------------------------------------------------------


def test_doctor_reference_kaggle_host_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", "kaggle-t4x2-cu128", "--host", KAGGLE_HOST, "--strict")
    assert code == 0
    assert out.rstrip().endswith("COMPATIBLE: this host matches profile kaggle-t4x2-cu128")
    assert "WARN" not in out and "ERROR" not in out


def test_doctor_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", "kaggle-t4x2-cu128", "--host", KAGGLE_HOST, "--json")
    data = json.loads(out)
    assert code == 0 and data["compatible"] is True
    assert data["summary"]["host"]["error"] == 0
    assert {f["check"] for f in data["findings"]} >= {"GPU count", "NCCL", "libcuda"}


def test_doctor_bad_snapshot_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "doctor", "--host", str(tmp_path / "nope.json"))
    assert code == 2 and "host snapshot not found" in err
    bad = tmp_path / "bad.json"
    data = json.loads(Path(KAGGLE_HOST).read_text())
    data["gpus"][1]["index"] = "one"
    bad.write_text(json.dumps(data))
    code, _, err = run(capsys, "doctor", "--host", str(bad))
    assert code == 2
    assert "$.gpus[1].index" in err
    assert "Traceback" not in err


def test_doctor_live_on_this_machine_explains(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "doctor", "kaggle-t4x2-cu128", "--strict")
    assert code in (0, 1)
    assert ("NOT COMPATIBLE" in out) == (code == 1)
    if code == 1:
        assert "fix:" in out


# verify-gpus -----------------------------------------------------------------------------------


def test_verify_gpus_from_a_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "verify-gpus", "--profile", "kaggle-t4x2-cu128", "--host", KAGGLE_HOST
    )
    assert code == 0
    assert out.startswith("PASS: 2 visible Tesla T4 (SM 7.5) GPU(s) support tensor_parallel_size=2")
    code, out, _ = run(capsys, "verify-gpus", "--tensor-parallel-size", "4", "--host", KAGGLE_HOST)
    assert code == 1
    assert out.startswith("FAIL: tensor_parallel_size=4 needs 4 visible GPUs; found 2 visible")
    code, out, _ = run(
        capsys, "verify-gpus", "--tensor-parallel-size", "2", "--host", KAGGLE_HOST, "--json"
    )
    assert code == 0 and json.loads(out)["verdict"] == "PASS"


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "True", "two"])
def test_verify_gpus_rejects_bad_sizes(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify-gpus", "--tensor-parallel-size", value]) == 2
    assert "--tensor-parallel-size" in capsys.readouterr().err


def test_verify_gpus_needs_a_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "verify-gpus", "--host", KAGGLE_HOST)
    assert code == 2 and "--tensor-parallel-size is required" in err


# verify-wheel, stage-wheel ---------------------------------------------------------------------


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(
        tmp_path / "wheels", "demo-pkg", "1.2.3", entry_points={"demo": "demo_pkg:main"}
    )


def test_verify_wheel(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digest = sha256_of(wheel)
    code, out, _ = run(capsys, "verify-wheel", str(wheel))
    assert (code, out) == (0, f"{digest}  {wheel.name}\n")
    for given in (digest, digest.upper(), f"sha256:{digest}", f"  {digest}  {wheel.name}\n"):
        assert run(capsys, "verify-wheel", str(wheel), "--sha256", given)[0] == 0
    code, out, _ = run(capsys, "verify-wheel", str(wheel), "--json", "--sha256", digest)
    data = json.loads(out)
    assert (data["name"], data["version"], data["match"]) == ("demo-pkg", "1.2.3", True)
    assert data["size"] == wheel.stat().st_size


def test_verify_wheel_mismatch_and_malformed(
    wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "verify-wheel", str(wheel), "--sha256", "a" * 64)
    assert code == 1 and out == ""  # the check ran and failed (the README's exit-code table)
    assert f"sha256 mismatch for {wheel}: expected {'a' * 64}, got {sha256_of(wheel)}" in err
    for bad in ("abc", "g" * 64, "", "md5:" + "a" * 32):
        code, _, err = run(capsys, "verify-wheel", str(wheel), "--sha256", bad)
        assert code == 2 and "malformed sha256" in err
    code, _, err = run(capsys, "verify-wheel", str(tmp_path / "missing-1.0-py3-none-any.whl"))
    assert code == 2 and "wheel not found" in err
    other = tmp_path / "notes.txt"
    other.write_text("x")
    code, _, err = run(capsys, "verify-wheel", str(other))
    assert code == 2 and "not a wheel file name" in err


def test_stage_wheel(wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "staged"
    code, out, _ = run(
        capsys, "stage-wheel", str(wheel), "--target", str(target), "--sha256", sha256_of(wheel)
    )
    assert code == 0
    assert f"staged without dependencies: {target}" in out
    assert (target / "demo_pkg" / "__init__.py").is_file()
    assert (target / "demo_pkg-1.2.3.dist-info" / "RECORD").is_file()
    assert (target / "bin" / "demo").is_file()


def test_stage_wheel_refusals(
    wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "stage-wheel", str(wheel), "--target", str(busy))
    assert code == 2 and "refusing to overwrite non-empty staging target" in err
    assert sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
    fresh = tmp_path / "fresh"
    code, _, err = run(
        capsys, "stage-wheel", str(wheel), "--target", str(fresh), "--sha256", "b" * 64
    )
    assert code == 2 and "sha256 mismatch" in err
    assert not fresh.exists()
    sneaky = build_wheel(tmp_path / "w2", "sneaky", "1.0", files={"torch/__init__.py": "x = 1\n"})
    code, _, err = run(capsys, "stage-wheel", str(sneaky), "--target", str(fresh))
    assert code == 2 and "torch" in err
    assert not fresh.exists()


# init ------------------------------------------------------------------------------------------


def test_init_plain_and_never_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "init", "team-box", "--dir", str(tmp_path))
    path = tmp_path / "profiles" / "team-box.toml"
    assert code == 0 and f"wrote {path}" in out
    text = path.read_text()
    assert not text.startswith("#:schema")  # no schemas/profile.schema.json in this project
    assert "`kvenv schema profile > schemas/profile.schema.json`" in text
    assert "note: no #:schema line" in out
    assert "# [native]" in text and "# [target]" in text
    loaded = load_profile(str(path), cwd=tmp_path)
    assert loaded.profile.name == "team-box" and loaded.profile.target is None
    path.write_text(text + "# my edit\n")
    code, _, err = run(capsys, "init", "team-box", "--dir", str(tmp_path))
    assert code == 2 and "refusing to overwrite" in err
    assert path.read_text().endswith("# my edit\n")
    assert [p.name for p in (tmp_path / "profiles").iterdir()] == ["team-box.toml"]


def test_init_extends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(
        capsys, "init", "team-t4", "--extends", "kaggle-t4x2-cu128", "--dir", str(tmp_path)
    )
    assert code == 0
    loaded = load_profile(str(tmp_path / "profiles" / "team-t4.toml"), cwd=tmp_path)
    assert loaded.profile.extends == "kaggle-t4x2-cu128"
    assert loaded.profile.target is not None and loaded.profile.target.abi == "cp312"
    assert loaded.profile.native is not None and loaded.profile.native.name == "vllm"


def test_init_from_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "init", "here", "--from-host", "--dir", str(tmp_path))
    assert code == 0
    snap = tmp_path / "profiles" / "here.host.json"
    assert f"wrote {snap}" in out
    loaded = load_profile(str(tmp_path / "profiles" / "here.toml"), cwd=tmp_path)
    target = loaded.profile.target
    assert target is not None
    assert target.abi == read_snapshot(snap).python.abi
    assert loaded.snapshot_path == snap
    # doctor of a profile made from this host, on this host, has no errors
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "doctor", "here", "--host", str(snap))
    assert code == 0, out
    code, _, err = run(capsys, "init", "here", "--from-host", "--dir", str(tmp_path))
    assert code == 2 and "refusing to overwrite" in err


def test_init_from_host_with_python_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``init --from-host --python X`` records ``[host] python`` (the interpreter probed, a
    venv's link kept as a link), so every later command judges X, not kvenv's own."""
    import venv

    from kvenv.probe.interpreter import resolve_host_python

    project = tmp_path / "team"
    project.mkdir()
    venv.EnvBuilder(symlinks=True, with_pip=False).create(project / ".venv")
    inner = project / ".venv" / "bin" / "python"
    code, _, err = run(
        capsys, "init", "here", "--from-host", "--python", str(inner), "--dir", str(project)
    )
    assert code == 0, err
    text = (project / "profiles" / "here.toml").read_text()
    assert 'python = ".venv/bin/python"' in text  # inside the project: relative to it
    loaded = load_profile(str(project / "profiles" / "here.toml"), cwd=project)
    assert loaded.profile.host.python == ".venv/bin/python"
    assert loaded.host_python_path == inner  # not resolved through the venv's link
    chosen = resolve_host_python(flag=None, environ={}, profile_value=str(loaded.host_python_path))
    assert chosen.path == str(inner) and "[host] python" in chosen.source
    # outside the project: the absolute path
    other = tmp_path / "elsewhere"
    other.mkdir()
    code, _, err = run(
        capsys, "init", "there", "--from-host", "--python", str(inner), "--dir", str(other)
    )
    assert code == 0, err
    there = load_profile(str(other / "profiles" / "there.toml"), cwd=other)
    assert there.profile.host.python == str(inner)
    # without --python nothing is recorded (every command keeps choosing by the usual rule)
    code, _, _ = run(capsys, "init", "plain", "--from-host", "--dir", str(other))
    assert code == 0
    plain = load_profile(str(other / "profiles" / "plain.toml"), cwd=other)
    assert plain.profile.host.python is None


def test_init_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "init", "Bad Name", "--dir", str(tmp_path))
    assert code == 2 and "invalid profile name" in err
    code, _, err = run(capsys, "init", "x", "--extends", "no-such-profile", "--dir", str(tmp_path))
    assert code == 2 and "no profile named 'no-such-profile'" in err
    assert not (tmp_path / "profiles").exists()


# a fake nvidia-smi on PATH, the CLI in a subprocess ---------------------------------------------


def _fake_smi(bin_dir: Path, scenario: str) -> None:
    data = hf.scenario(scenario)["commands"]
    cases: list[str] = []
    for line, spec in data.items():
        args = line.split(" ", 1)[1] if " " in line else ""
        out = hf.command_output(scenario, spec)
        stored = bin_dir / f"out{len(cases)}.txt"
        stored.write_text(out.stdout)
        cases.append(f'  "{args}") cat "{stored}"; exit {out.returncode} ;;')
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        + "\n".join(cases)
        + '\n  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;\nesac\n'
    )
    script.chmod(0o755)


def _kvenv(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None, smi: str | None = None
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if smi:
        _fake_smi(bin_dir, smi)
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environ["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "kvenv", *argv],
        capture_output=True,
        text=True,
        env=environ,
        cwd=REPO,
        timeout=120,
        check=False,
    )


needs_no_nvml = pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is not None,
    reason="pynvml is importable here: the GPUs would come from NVML, not the fake nvidia-smi",
)


@needs_no_nvml
def test_fake_nvidia_smi_kaggle(tmp_path: Path) -> None:
    done = _kvenv(tmp_path, "fingerprint", "--json", smi="kaggle-t4x2")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [(g["name"], g["compute_capability"], g["memory_mib"]) for g in data["gpus"]] == [
        ("Tesla T4", "7.5", 15360)
    ] * 2
    if not Path("/proc/driver/nvidia/version").exists():
        assert data["driver"] == {
            "version": "580.159.04",
            "cuda_max": "13.0",
            "source": "nvidia-smi",
        }
    done = _kvenv(tmp_path, "verify-gpus", "--profile", "kaggle-t4x2-cu128", smi="kaggle-t4x2")
    assert (done.returncode, done.stdout.splitlines()[0]) == (
        0,
        "PASS: 2 visible Tesla T4 (SM 7.5) GPU(s) support tensor_parallel_size=2",
    )
    done = _kvenv(
        tmp_path,
        "verify-gpus",
        "--tensor-parallel-size",
        "2",
        env={"CUDA_VISIBLE_DEVICES": "1"},
        smi="kaggle-t4x2",
    )
    assert done.returncode == 1
    assert done.stdout.startswith("FAIL: tensor_parallel_size=2 needs 2 visible GPUs; found 1")
    assert "CUDA_VISIBLE_DEVICES='1': 1 of 2 GPU(s) visible" in done.stdout


@needs_no_nvml
def test_fake_nvidia_smi_h200_is_not_the_kaggle_target(tmp_path: Path) -> None:
    done = _kvenv(tmp_path, "verify-gpus", "--profile", "kaggle-t4x2-cu128", smi="h200")
    assert done.returncode == 1
    assert done.stdout.startswith(
        "FAIL: tensor_parallel_size=2 needs 2 visible GPUs; found 1 visible (NVIDIA H200)"
    )
    done = _kvenv(tmp_path, "verify-gpus", "--tensor-parallel-size", "1", smi="h200")
    assert done.returncode == 0
    assert done.stdout.startswith("PASS: 1 visible NVIDIA H200 (SM 9.0)")
    done = _kvenv(tmp_path, "doctor", "kaggle-t4x2-cu128", "--json", smi="h200")
    findings = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert done.returncode == 1
    assert findings["GPU model"]["message"] == "GPU model: expected Tesla T4; found NVIDIA H200"
    assert findings["compute capability"]["status"] == "warning"


@needs_no_nvml
def test_fake_nvidia_smi_without_driver(tmp_path: Path) -> None:
    done = _kvenv(tmp_path, "fingerprint", smi="no-driver")
    assert done.returncode == 0
    assert "nvidia-smi failed (exit 9)" in done.stdout


def test_no_gpu_tools_at_all(tmp_path: Path) -> None:
    """This machine as it is (no GPU here): every command explains, none crashes."""
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    finger = _kvenv(tmp_path, "fingerprint")
    assert finger.returncode == 0
    assert "driver:    NOT FOUND" in finger.stdout
    assert "no NVIDIA driver" in finger.stdout
    doctor = _kvenv(tmp_path, "doctor", "kaggle-t4x2-cu128")
    assert doctor.returncode == 1
    assert "GPU count: expected 2 x Tesla T4; found 0 (no NVIDIA driver)" in doctor.stdout
    done = _kvenv(tmp_path, "verify-gpus", "--tensor-parallel-size", "2")
    assert done.returncode == 1
    assert done.stdout.startswith(
        "FAIL: tensor_parallel_size=2 needs 2 visible GPUs; found no visible GPU (no NVIDIA driver)"
    )
    for result in (finger, doctor, done):
        assert "Traceback" not in result.stdout + result.stderr


def test_init_from_the_recorded_kaggle_host_reproduces_the_builtin_target() -> None:
    from kvenv.model.init import render_profile
    from tests.support.profiles import loads_profile

    builtin = load_profile("kaggle-t4x2-cu128").profile
    text = render_profile(
        "kaggle-copy",
        host=read_snapshot(Path(KAGGLE_HOST)),
        snapshot="profiles/kaggle-copy.host.json",
    )
    made = loads_profile(text, file="kaggle-copy.toml")
    assert made.target == builtin.target
    assert made.runtime.tensor_parallel_size == 2
    assert made.description == "Kaggle, 2 x Tesla T4, Python 3.12.13, torch 2.10.0+cu128"


def test_init_writes_the_schema_line_only_where_the_schema_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "schemas" / "profile.schema.json"
    schema.parent.mkdir()
    code, text, _ = run(capsys, "schema", "profile")
    assert code == 0
    schema.write_text(text)
    code, out, _ = run(capsys, "init", "team-box", "--dir", str(tmp_path))
    text = (tmp_path / "profiles" / "team-box.toml").read_text()
    assert code == 0 and "note: no #:schema line" not in out
    assert text.startswith("#:schema ../schemas/profile.schema.json\n")
    # the line resolves, from the profile's directory, to the schema file
    line = text.splitlines()[0].split(" ", 1)[1]
    assert ((tmp_path / "profiles") / line).resolve() == schema.resolve()
