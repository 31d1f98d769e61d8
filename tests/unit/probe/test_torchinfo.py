"""Torch read from metadata and version.py without importing it; --import-torch in a child."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import pytest

from kvenv.env.wheelinstall import install_wheel
from kvenv.model.fields import PackageName, Pep440Version
from kvenv.model.snapshot import Distribution, TorchInfo
from kvenv.probe.effects import Effects, RunResult, live
from kvenv.probe.torchinfo import (
    cuda_from_label,
    import_torch,
    parse_version_file,
    torch_from_metadata,
)
from tests.support.wheels import build_wheel

VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.10.0+cu128'
debug = False
cuda: Optional[str] = '12.8'
git_version = '449b1768410104d3ed79d3bcfe4ba1d65c7f22c0'
hip: Optional[str] = None
xpu: Optional[str] = None
"""

FAKE_TORCH = {
    "torch/__init__.py": (
        "import os\n"
        "if os.environ.get('FAKE_TORCH_BROKEN'):\n"
        "    raise ImportError('libcudart.so.12: cannot open shared object file')\n"
        "from torch import version, cuda\n"
        "__version__ = version.__version__\n"
    ),
    "torch/version.py": VERSION_PY,
    "torch/cuda/__init__.py": (
        "from torch.cuda import nccl\n"
        "def is_available():\n    return True\n"
        "def device_count():\n    return 2\n"
    ),
    "torch/cuda/nccl.py": "def version():\n    return (2, 27, 5)\n",
}


def _dist(version: str, location: object) -> Distribution:
    return Distribution(PackageName("torch"), Pep440Version(version), location=str(location))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    target = tmp_path / "site"
    target.mkdir()
    wheel = build_wheel(tmp_path / "w", "torch", "2.10.0+cu128", files=FAKE_TORCH)
    install_wheel(wheel, target)
    return target


def test_parse_version_file() -> None:
    fields = parse_version_file(VERSION_PY)
    assert fields["__version__"] == "2.10.0+cu128"
    assert fields["cuda"] == "12.8"
    assert fields["hip"] is None
    assert parse_version_file("this is not python (") == {}
    assert parse_version_file("cuda = compute()\n") == {}


@pytest.mark.parametrize(
    ("version", "cuda"),
    [
        ("2.10.0+cu128", "12.8"),
        ("2.1.2+cu118", "11.8"),
        ("2.9.0+cu130", "13.0"),
        ("2.10.0+cpu", None),
        ("2.10.0", None),
        ("2.5.1+rocm6.2", None),
    ],
)
def test_cuda_from_label(version: str, cuda: str | None) -> None:
    assert cuda_from_label(version) == cuda


def test_from_metadata_without_import(site: Path) -> None:
    dist = _dist("2.10.0+cu128", str(site))
    info, notes = torch_from_metadata(dist)
    assert info == TorchInfo(version="2.10.0+cu128", cuda="12.8", location=f"{site}/torch")
    assert notes == []
    assert "torch" not in sys.modules


def test_from_metadata_without_version_file(tmp_path: Path) -> None:
    dist = _dist("2.9.0+cu126", str(tmp_path))
    info, notes = torch_from_metadata(dist)
    assert (info.version, info.cuda) == ("2.9.0+cu126", "12.6")
    assert notes and "version.py" in notes[0]


def test_cpu_build(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.10.0+cpu'\ncuda = None\n")
    dist = _dist("2.10.0+cpu", str(tmp_path))
    info, _ = torch_from_metadata(dist)
    assert (info.version, info.cuda) == ("2.10.0+cpu", None)


def test_import_torch_in_a_child_process(site: Path) -> None:
    path = [str(site), *[p for p in sys.path if p]]
    base = TorchInfo(version="2.10.0+cu128", cuda="12.8", location=f"{site}/torch")
    info, notes = import_torch(base, sys.executable, path, live())
    assert notes == []
    assert info == TorchInfo(
        version="2.10.0+cu128",
        cuda="12.8",
        location=f"{site}/torch",
        cuda_available=True,
        device_count=2,
        nccl="2.27.5",
    )
    assert "torch" not in sys.modules


def test_import_torch_failure_is_a_note(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TORCH_BROKEN", "1")
    base = TorchInfo(version="2.10.0+cu128", cuda="12.8")
    info, notes = import_torch(base, sys.executable, [str(site), *sys.path[1:]], live())
    assert info == base
    assert notes == [
        "import torch failed: ImportError: libcudart.so.12: cannot open shared object file"
    ]


def test_import_torch_unusable_answers() -> None:
    base = TorchInfo(version="2.10.0+cu128")
    gone = Effects.recorded()
    info, notes = import_torch(base, "/nowhere/python", [], gone)
    assert info == base and "could not run" in notes[0]
    crashed = attrs.evolve(gone, run=lambda argv, t: RunResult(-11, "", "Segmentation fault\n"))
    info, notes = import_torch(base, "python", [], crashed)
    assert info == base and notes == [
        "--import-torch: the probe failed (exit -11): Segmentation fault"
    ]


def test_import_torch_old_int_nccl_answer() -> None:
    answer = {
        "version": "1.13.1+cu117",
        "cuda": "11.7",
        "cuda_available": False,
        "device_count": 0,
        "nccl": "2.14.3",
    }
    fx = attrs.evolve(
        Effects.recorded(), run=lambda argv, t: RunResult(0, json.dumps(answer) + "\n")
    )
    info, _ = import_torch(None, "python", [], fx)
    assert info is not None
    assert (info.version, info.cuda_available, info.device_count, info.nccl) == (
        "1.13.1+cu117",
        False,
        0,
        "2.14.3",
    )
