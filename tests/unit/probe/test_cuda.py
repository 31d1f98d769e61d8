"""The CUDA toolkit, libcuda, platform and Kaggle probes on recorded hosts."""

from __future__ import annotations

import pytest

from kvenv.probe.cuda import parse_nvcc, parse_version_json, probe_cuda
from kvenv.probe.effects import Effects, RunResult, parse_musl
from kvenv.probe.kaggle import is_kaggle
from kvenv.probe.system import probe_platform
from tests.support import hostfixtures as hf


@pytest.mark.parametrize("name", hf.SCENARIOS)
def test_recorded_hosts(name: str) -> None:
    expect = hf.scenario(name)["expect"]
    fx = hf.effects(name)
    cuda = probe_cuda(fx)
    assert cuda.toolkit_version == expect["toolkit"]
    assert cuda.libcuda == expect["libcuda"]
    assert is_kaggle(fx) is expect["is_kaggle"]


def test_kaggle_paths() -> None:
    cuda = probe_cuda(hf.effects("kaggle-t4x2"))
    assert cuda.home == "/usr/local/cuda"
    assert cuda.nvcc == "/usr/local/cuda/bin/nvcc"
    assert cuda.library_dirs == ["/usr/local/nvidia/lib64", "/usr/local/cuda/lib64"]


def test_cuda_home_from_environment() -> None:
    cuda = probe_cuda(hf.effects("h200"))
    assert cuda.home == "/opt/cuda-12.8"
    assert cuda.library_dirs == ["/usr/local/nvidia/lib64", "/opt/cuda-12.8/lib64"]


def test_compat_libcuda_and_ld_library_path() -> None:
    compat = Effects.recorded(files={"/usr/local/cuda/compat/libcuda.so.1": ""})
    assert probe_cuda(compat).libcuda == "/usr/local/cuda/compat/libcuda.so.1"
    custom = Effects.recorded(
        files={"/opt/drv/libcuda.so.1": ""}, environ={"LD_LIBRARY_PATH": "/nowhere::/opt/drv"}
    )
    assert probe_cuda(custom).libcuda == "/opt/drv/libcuda.so.1"


def test_libcuda_from_loader_cache() -> None:
    cache = (
        "1342 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudart.so.12\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib64-nvidia/libcuda.so.1\n"
    )
    fx = Effects.recorded(commands={"ldconfig -p": RunResult(0, cache)})
    assert probe_cuda(fx).libcuda == "/usr/lib64-nvidia/libcuda.so.1"


def test_toolkit_version_sources() -> None:
    txt = Effects.recorded(files={"/usr/local/cuda/version.txt": "CUDA Version 10.2.89\n"})
    assert probe_cuda(txt).toolkit_version == "10.2.89"
    nvcc_out = (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Cuda compilation tools, release 12.8, V12.8.93\n"
        "Build cuda_12.8.r12.8/compiler.35583870_0\n"
    )
    fx = Effects.recorded(commands={"nvcc --version": RunResult(0, nvcc_out)})
    cuda = probe_cuda(fx)
    assert cuda.home == "/usr"  # two levels above /usr/bin/nvcc
    assert cuda.toolkit_version == "12.8.93"
    assert parse_nvcc("no release here") is None
    assert parse_version_json("not json") is None
    assert parse_version_json("[1, 2]") is None
    assert parse_version_json('{"cuda": {"version": "13.0.1"}}') == "13.0.1"


def test_nothing_at_all() -> None:
    cuda = probe_cuda(Effects.recorded())
    assert (cuda.home, cuda.toolkit_version, cuda.nvcc, cuda.libcuda) == (None, None, None, None)
    assert cuda.library_dirs == []


def test_platform() -> None:
    fx = hf.effects("kaggle-t4x2")
    plat = probe_platform(fx, sys_platform="linux", machine="x86_64")
    assert (plat.libc, plat.libc_version, plat.kernel) == ("glibc", "2.35", "6.12.90+")
    musl = Effects.recorded(libc=("musl", "1.2.4"))
    plat = probe_platform(musl, sys_platform="linux", machine="aarch64")
    assert (plat.libc, plat.libc_version, plat.kernel) == ("musl", "1.2.4", None)
    mac = probe_platform(Effects.recorded(), sys_platform="darwin", machine="arm64")
    assert (mac.os, mac.libc) == ("darwin", None)


def test_parse_musl() -> None:
    assert parse_musl("musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader\n") == (
        "musl",
        "1.2.4",
    )
    assert parse_musl("ldd (GNU libc) 2.36") is None


@pytest.mark.parametrize(
    ("environ", "dirs", "expected"),
    [
        ({"KAGGLE_KERNEL_RUN_TYPE": "Batch"}, [], True),
        ({"KAGGLE_URL_BASE": "https://example.invalid"}, [], True),
        ({"KAGGLE_DOCKER_IMAGE": "img"}, [], True),
        ({"KAGGLE_KERNEL_RUN_TYPE": ""}, [], False),
        ({}, ["/kaggle/working", "/kaggle/input"], True),
        ({}, ["/kaggle/working"], False),
        ({}, [], False),
    ],
)
def test_kaggle_detection(environ: dict[str, str], dirs: list[str], expected: bool) -> None:
    assert is_kaggle(Effects.recorded(environ=environ, dirs=dirs)) is expected
