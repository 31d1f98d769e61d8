"""Activation: shell rendering with correct quoting, .pth handling, protected-name refusal, and
in-process activation in a child interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.activation import build_activation, check_not_shadowing, render
from kvenv.env.manifest import Activation
from kvenv.errors import InputError, IntegrityError, UsageError
from tests.support.paths import REPO

REPO_ROOT = REPO
NASTY = "/tmp/a dir/with 'quotes' $HOME `x` \"dq\" \\back"


def _activation() -> Activation:
    return Activation(
        pythonpath=[f"{NASTY}/overlay", "/r/native"],
        path=["/r/bin"],
        ld_library_path=["/host/torch/lib"],
        env={"VLLM_X": "it's $(not run)", "EMPTY": ""},
    )


def test_bash_and_zsh_quote_every_value() -> None:
    text = render(_activation(), "bash")
    script = text + 'printf "%s\\n" "$PYTHONPATH" "$PATH" "$VLLM_X" "$LD_LIBRARY_PATH"'
    run = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/old"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = run.stdout.splitlines()
    assert lines[0] == f"{NASTY}/overlay:/r/native:/old"
    assert lines[1] == "/r/bin:/usr/bin:/bin"
    assert lines[2] == "it's $(not run)"
    assert lines[3] == "/host/torch/lib"
    assert render(_activation(), "zsh") == text


def test_fish_quoting() -> None:
    text = render(_activation(), "fish")
    assert "set -gx VLLM_X 'it\\'s $(not run)'" in text
    assert "set -gx PATH '/r/bin' $PATH" in text
    if shutil.which("fish"):
        run = subprocess.run(
            ["fish", "-c", text + "echo $VLLM_X"], capture_output=True, text=True, check=True
        )
        assert run.stdout == "it's $(not run)\n"


def test_pwsh_quoting() -> None:
    text = render(_activation(), "pwsh")
    assert "$env:VLLM_X = 'it''s $(not run)'" in text
    assert "$env:PATH = '/r/bin' + $(if ($env:PATH)" in text


def test_json_and_unknown_shell() -> None:
    data = json.loads(render(_activation(), "json", manifest_path="/r/m.json"))
    assert data["prepend"]["PYTHONPATH"][1] == "/r/native"
    assert data["set"]["KVENV_MANIFEST"] == "/r/m.json"
    with pytest.raises(UsageError, match="unknown shell"):
        render(_activation(), "tcsh")


def test_pth_paths_expanded_imports_kept_outside_dropped(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    overlay, native, bin_dir = gen / "overlay", gen / "native", gen / "bin"
    for d in (overlay / "extra", native, bin_dir):
        d.mkdir(parents=True)
    (overlay / "a.pth").write_text("# comment\nextra\nimport os\n/etc\nmissing-dir\n")
    activation, notes = build_activation(
        generation=gen,
        overlay=overlay,
        native=native,
        bin_dir=bin_dir,
        host=None,
        env={"K": "v"},
        protected=["torch"],
    )
    assert activation.pythonpath == [str(overlay), str(overlay / "extra"), str(native)]
    assert activation.pth_imports == ["import os"]
    assert notes == ["a.pth: path '/etc' is outside the generation, ignored"]


def test_protected_name_in_overlay_is_refused(tmp_path: Path) -> None:
    (tmp_path / "overlay" / "torchvision").mkdir(parents=True)
    with pytest.raises(IntegrityError, match="shadow the protected host package"):
        check_not_shadowing([tmp_path / "overlay"], ["torchvision"])


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full.pop("KVENV_MANIFEST", None)
    full.update(env, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, check=False
    )


def test_activate_without_a_manifest_is_false(tmp_path: Path) -> None:
    run = _child(
        "import kvenv; print(kvenv.activate())",
        KVENV_ROOT=str(tmp_path / "nothing"),
        KVENV_PROFILE_PATH=str(REPO_ROOT / "profiles"),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "False\n"


def test_broken_manifest_raises(tmp_path: Path) -> None:
    from kvenv.env.activation import activate_in_process

    broken = tmp_path / "manifest.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        activate_in_process(manifest=broken)
