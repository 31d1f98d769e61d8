"""The built-in profiles for hosted notebooks against their real package sets: what the Kaggle
and Colab overlays still shadow (each for a reason), the colab-gpu profile's verdicts on this
machine and on Colab's current runtime, and its snapshot regenerated from the freeze."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from kvenv.cli import main
from kvenv.lock.pylock import read_lock
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import read_snapshot
from tests.support.paths import REPO

HOSTS = REPO / "docs" / "hosts"
COLAB_NOW = HOSTS / "colab-gpu.2026-08-19.host.json"
# name -> (the image's version, the overlay's): every one a validated pin of the reference
# system, and each required at a version the image's does not satisfy
KAGGLE_SHADOWS = {
    "huggingface-hub": ("1.11.0", "0.36.2"),
    "idna": ("3.13", "3.19"),
    "lark": ("1.3.1", "1.2.2"),
    "llvmlite": ("0.43.0", "0.44.0"),
    "numba": ("0.60.0", "0.61.2"),
    "openai": ("2.32.0", "2.24.0"),
    "protobuf": ("5.29.5", "6.33.6"),
    "starlette": ("0.52.1", "1.6.0"),
    "transformers": ("5.0.0", "4.57.6"),
}
COLAB_SHADOWS = {
    "idna": ("3.13", "3.20"),
    "lark": ("1.3.1", "1.2.2"),
    "llvmlite": ("0.43.0", "0.44.0"),
    "numba": ("0.60.0", "0.61.2"),
    "setuptools": ("75.2.0", "80.10.2"),
    "transformers": ("5.0.0", "5.12.1"),
}
# The command docs/hosts.md gives for the colab-gpu snapshot.
COLAB_COMMAND = [
    "fingerprint",
    "--from-freeze",
    "docs/hosts/colab-gpu.pip-freeze.2026-05-08.txt",
    "--python-version",
    "3.12.13",
    "--glibc",
    "2.35",
    "--cuda",
    "12.8.90",
    "--nccl",
    "2.27.5",
    "--gpu",
    "Tesla T4,7.5,15360",
    "--taken-at",
    "2026-05-08",
    "--note",
    "Colab's GPU runtime (googlecolab/backend-info 6f38803, 2026-05-08): Ubuntu 22.04.5 (glibc "
    "2.35), CUDA 12.8 runtime (cuda-cudart 12.8.90), NCCL 2.27.5 (nvidia-nccl-cu12); the GPU is "
    "the free tier's Tesla T4; the driver is not published",
    "--note",
    "made by the command in docs/hosts.md; a `kvenv fingerprint --save` taken in a Colab "
    "notebook knows more",
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _unmet(name: str, host_version: str, lock: Path) -> list[str]:
    """The lock's requirements on ``name`` (native and packages, extras aside) that the host's
    version does not satisfy."""
    lockfile = read_lock(lock)
    lines = list(lockfile.kvenv.native.requires)
    for tool in lockfile.package_tools:
        lines += tool.requires if tool is not None else []
    out = []
    for line in lines:
        req = Requirement(line)
        if canonicalize_name(req.name) != name or (req.marker and "extra" in str(req.marker)):
            continue
        if not req.specifier.contains(Version(host_version), prereleases=True):
            out.append(line)
    return out


@pytest.mark.parametrize(
    ("profile", "shadows", "pinned"),
    [("kaggle-t4x2-cu128", KAGGLE_SHADOWS, True), ("colab-gpu", COLAB_SHADOWS, False)],
)
def test_each_shadow_is_required_at_a_version_the_image_lacks(
    profile: str, shadows: dict[str, tuple[str, str]], pinned: bool
) -> None:
    loaded = load_profile(profile)
    assert loaded.snapshot_path is not None
    host = read_snapshot(loaded.snapshot_path)
    lockfile = read_lock(loaded.lock_path)
    recorded = {s.name: (s.host_version, s.overlay_version) for s in lockfile.kvenv.shadows}
    assert recorded == shadows
    for name, (image, _) in shadows.items():
        dist = host.find(name)
        assert dist is not None and dist.version == image
        assert _unmet(name, image, loaded.lock_path), f"{name} {image} would do"
    if pinned:  # the reference system's validated pins are the profile's roots and all win
        declared = [str(r) for r in loaded.profile.overlay.requires]
        roots = {canonicalize_name(Requirement(r).name): r for r in declared}
        assert len(roots) == 47
        for name, (_, overlay) in shadows.items():
            assert roots[name].endswith(f"=={overlay}")
    # everything else the overlay installs is absent from the image
    locked = {canonicalize_name(p.name) for p in lockfile.pylock.packages}
    native = canonicalize_name(lockfile.kvenv.native.name)
    on_image = {n for n in locked - {native} if host.find(n) is not None}
    assert on_image == set(shadows)


def test_colab_snapshot_is_regenerated_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "colab.json"
    code, _, err = run(capsys, *COLAB_COMMAND, "--save", str(out))
    assert code == 0, err
    assert out.read_text() == (REPO / "profiles" / "colab-gpu.host.json").read_text()
    doc = (REPO / "docs" / "hosts.md").read_text()
    assert all(word in doc for word in COLAB_COMMAND[1:15])


def test_colab_gpu_on_its_own_runtime_is_compatible(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "colab-gpu", "--host", "profiles/colab-gpu.host.json")
    assert code == 0 and "compatible: yes" in out
    assert "host drift: none: this host matches the snapshot profiles/colab-gpu.host.json" in out


def test_colab_gpu_on_colabs_current_runtime_says_exactly_why_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    code, out, _ = run(capsys, "plan", "colab-gpu", "--host", str(COLAB_NOW), "--json")
    assert code != 0
    data = json.loads(out)
    assert data["compatible"] is False
    errors = [f["message"] for f in data["findings"] if f["status"] == "error"]
    assert "Python ABI: expected cp312; found cp313" in errors
    torch = next(m for m in errors if m.startswith("host drift: torch"))
    assert torch.startswith("host drift: torch 2.10.0+cu128 -> 2.11.0+cu128:")
    assert "vllm 0.19.1 requires torch==2.10.0, which 2.11.0+cu128 does not satisfy" in torch
    fixes = [f["fix"] for f in data["findings"] if f["message"] == torch]
    assert fixes[0].startswith("build the native wheel for torch 2.11.0+cu128 on this image")
    python = next(m for m in errors if m.startswith("host drift: Python"))
    assert python.startswith("host drift: Python 3.12.13 -> 3.13.15: the lock does not hold")


def test_colab_gpu_on_this_machine_is_a_precise_no(capsys: pytest.CaptureFixture[str]) -> None:
    host = read_snapshot(REPO / "profiles" / "colab-gpu.host.json")
    code, out, _ = run(capsys, "plan", "colab-gpu", "--json")
    data = json.loads(out)
    if data["compatible"]:  # only a Colab GPU runtime of 2026-05-08 passes
        pytest.skip("this machine is the Colab runtime the profile targets")
    assert code != 0
    errors = [f for f in data["findings"] if f["status"] == "error"]
    assert errors and all(f["fix"] for f in errors)
    assert host.torch is not None
    drift = [f["message"] for f in data["findings"] if f["check"] == "host drift"]
    assert drift  # what differs from the recorded runtime, said
