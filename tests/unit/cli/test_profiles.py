"""``kvenv profiles``, ``show``, ``validate`` and ``schema`` from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.model.loading import DEFAULT_PROFILE, builtin_dir, load_profile
from tests.support.paths import REPO
from tests.support.profiles import loads_profile

ROOT = REPO


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "lab.toml").write_text(
        f'schema = 1\nname = "lab"\ndescription = "the lab box"\nextends = "{DEFAULT_PROFILE}"\n'
        "[target.gpu]\ncount = 1\n[runtime]\ntensor_parallel_size = 1\n",
        encoding="utf-8",
    )
    (tmp_path / "profiles" / "broken.toml").write_text("schema = 1\nname = 3\n")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def test_profiles_lists_name_origin_description(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "profiles")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert set(lines) == {"broken", "lab", "demo", "colab-gpu", "cpu-x86-64", DEFAULT_PROFILE}
    assert "builtin" in lines["colab-gpu"] and "Colab GPU runtime" in lines["colab-gpu"]
    assert "project" in lines["lab"] and "the lab box" in lines["lab"]
    assert "builtin" in lines[DEFAULT_PROFILE] and "Kaggle notebook" in lines[DEFAULT_PROFILE]
    assert "invalid" in lines["broken"]
    assert "builtin" in lines["demo"]


def test_profiles_json(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profiles", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["profiles"]}
    assert rows["lab"] == {
        "name": "lab",
        "origin": "project",
        "path": str(Path("profiles") / "lab.toml"),
        "description": "the lab box",
        "valid": True,
    }
    assert rows["broken"]["valid"] is False
    assert rows[DEFAULT_PROFILE]["path"] == str(builtin_dir() / f"{DEFAULT_PROFILE}.toml")


def test_show_defaults_to_the_default_profile(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "show")
    assert (code, err) == (0, "")
    assert out.startswith(f"profile   {DEFAULT_PROFILE}  (builtin: ")
    assert "2 x Tesla T4, compute capability 7.5, 15360 MiB" in out
    assert "driver >= 580.159.04, CUDA 12.8" in out
    assert "f6b4f10de54924ed6fe9e28cceab84eca7276ab6" in out
    assert "383922260 bytes" in out
    assert "tensor_parallel_size=2" in out and "attention_backend=TRITON_ATTN" in out
    assert "protected: torch, torchvision, torchaudio" in out


def test_show_text_names_the_chain(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "lab")
    assert code == 0
    assert "extends   " in out and f"{DEFAULT_PROFILE}.toml" in out
    assert "1 x Tesla T4" in out


def test_show_toml_is_the_merged_profile(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "lab", "--toml")
    assert code == 0
    shown = loads_profile(out)
    assert shown == load_profile("lab").profile
    assert shown.native is not None and shown.native.size == 383922260


def test_show_json(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "lab", "--json")
    assert code == 0
    data = json.loads(out)
    loaded = load_profile("lab")
    assert data["digest"] == loaded.digest
    assert data["origin"] == "project"
    assert data["chain"] == [str(p) for p in loaded.chain]
    assert data["profile"]["target"]["gpu"]["count"] == 1
    assert data["profile"]["extends"] == DEFAULT_PROFILE
    assert data["lock"] == str(project / "locks" / "pylock.lab.toml")


def test_show_refuses_two_formats(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--json", "--toml"]) == 2


def test_validate_exit_codes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate")[0] == 0
    assert run(capsys, "validate", "lab", DEFAULT_PROFILE)[0] == 0
    code, out, _ = run(capsys, "validate", "lab", "broken")
    assert code == 1
    assert "valid       lab" in out
    assert "invalid     broken" in out and "$.name: expected a string" in out
    assert run(capsys, "validate", "lab", "broken", "missing.toml")[0] == 2


def test_validate_json(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", "--json", "lab", "broken", "gone")
    assert code == 2
    data = json.loads(out)
    assert data["valid"] is False
    statuses = [(r["ref"], r["status"]) for r in data["results"]]
    assert statuses == [("lab", "valid"), ("broken", "invalid"), ("gone", "unreadable")]
    assert data["results"][0]["digest"] == load_profile("lab").digest
    assert data["results"][1]["problems"][0]["path"] == "$.name"
    assert data["results"][1]["problems"][0]["file"].endswith("broken.toml")


def test_commands_as_a_user_runs_them(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVENV_")}
    cmd = [sys.executable, "-m", "kvenv"]
    ok = subprocess.run([*cmd, "validate", "lab"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([*cmd, "show", "broken"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert "profiles/broken.toml: $.name: expected a string, got int 3" in bad.stderr
    assert "Traceback" not in bad.stderr
    usage = subprocess.run([*cmd, "show", "--bogus"], capture_output=True, text=True, env=env)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
