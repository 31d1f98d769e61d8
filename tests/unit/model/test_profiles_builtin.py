"""The built-in profile carries the reference system's real values, and the wheel ships the
built-in profiles, locks and schemas where an installed kvenv finds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvenv.cli import schemas
from kvenv.model.loading import DEFAULT_PROFILE, load_profile
from kvenv.model.profile import HfSource
from kvenv.model.snapshot import read_snapshot
from tests.support.paths import REPO

ROOT = REPO


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_builtin_profile_has_the_reference_values(elsewhere: Path) -> None:
    loaded = load_profile(DEFAULT_PROFILE)
    p = loaded.profile
    assert loaded.origin == "builtin"
    t = p.target
    assert t is not None and t.gpu is not None
    assert (t.python, t.implementation, t.abi, t.os, t.machine, t.glibc) == (
        "3.12.13", "cpython", "cp312", "linux", "x86_64", "2.35",
    )  # fmt: skip
    assert (t.gpu.model, t.gpu.count, t.gpu.compute_capability, t.gpu.memory_mib) == (
        "Tesla T4", 2, "7.5", 15360,
    )  # fmt: skip
    assert (t.driver_min, t.cuda) == ("580.159.04", "12.8")
    assert p.host.protected == ["torch", "torchvision", "torchaudio"]
    n = p.native
    assert n is not None and isinstance(n.source, HfSource)
    assert (n.name, n.size) == ("vllm", 383922260)
    assert n.sha256 == "5a9bd710b8a19fdd23abb3442baad892da977466f996334decd533a225f5fd0c"
    assert n.source.repo == "waqasm86/kaggle-vllm-binaries"
    assert n.source.revision == "f6b4f10de54924ed6fe9e28cceab84eca7276ab6"
    assert n.source.filename == (
        "vllm-0.18.2.dev0+ga26e8dc7f.d20260822.cu128-cp312-cp312-linux_x86_64.whl"
    )
    r = p.runtime
    assert (r.dtype, r.enforce_eager, r.disable_custom_all_reduce) == ("float16", True, True)
    assert (r.tensor_parallel_size, r.attention_backend) == (2, "TRITON_ATTN")
    assert p.paths.root is not None and p.paths.root.startswith("/kaggle/working/")
    assert p.paths.cache is not None and p.paths.cache.startswith("/kaggle/working/")


def test_builtin_host_snapshot_records_what_is_known(elsewhere: Path) -> None:
    loaded = load_profile(DEFAULT_PROFILE)
    assert loaded.snapshot_path is not None
    snapshot = read_snapshot(loaded.snapshot_path)
    assert snapshot.torch is not None
    assert (snapshot.torch.version, snapshot.torch.cuda) == ("2.10.0+cu128", "12.8")
    assert snapshot.torch.nccl == "2.27.5"
    assert snapshot.python.version == "3.12.13"
    assert [g.compute_capability for g in snapshot.gpus] == ["7.5", "7.5"]
    numpy = snapshot.find("numpy")
    assert numpy is not None and numpy.version == "2.0.2"  # from the base image's pip freeze
    blake3 = snapshot.find("blake3")  # relied on by the reference system, in no listing
    assert blake3 is not None and blake3.version is None  # present, version never recorded


def test_wheel_ships_profiles_locks_and_schemas(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("kvenv_overlay-*.whl")  # the distribution kvenv-overlay
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    assert "kvenv/_data/profiles/kaggle-t4x2-cu128.toml" in names
    assert "kvenv/_data/profiles/kaggle-t4x2-cu128.host.json" in names
    assert "kvenv/py.typed" in names
    for name in schemas.SCHEMAS:
        assert f"kvenv/_data/schemas/{name}.schema.json" in names
    assert any(n.startswith("kvenv/_data/locks/") for n in names)

    # the unpacked wheel, not the source tree, answers for an installed kvenv
    site = tmp_path / "site"
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import json; "
        "from kvenv.model.loading import load_profile; "
        "p = load_profile('kaggle-t4x2-cu128'); "
        "print(json.dumps([p.origin, str(p.path), str(p.snapshot_path)]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVENV_")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    origin, path, snapshot = json.loads(done.stdout)
    data = site / "kvenv" / "_data"
    assert (origin, path) == ("builtin", str(data / "profiles" / "kaggle-t4x2-cu128.toml"))
    assert Path(snapshot).is_file()
    assert Path(snapshot).parent == data / "profiles"
