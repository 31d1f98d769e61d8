"""Host checks against the built-in Kaggle profile: every check passes on the recorded host and
fails, with a fix, when its fact differs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from kvenv.model.fields import DottedVersion, NonEmpty, PackageName, Pep440Version, PositiveInt
from kvenv.model.loading import load_profile
from kvenv.model.profile import Gpu, Profile
from kvenv.model.snapshot import DriverInfo, GpuInfo, HostSnapshot, read_snapshot
from kvenv.probe.checks import Finding, check_host, check_tensor_parallel

LOADED = load_profile("kaggle-t4x2-cu128")
PROFILE: Profile = LOADED.profile
assert LOADED.snapshot_path is not None
KAGGLE: HostSnapshot = read_snapshot(LOADED.snapshot_path)


def _by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def _evolve(obj: Any, **changes: Any) -> Any:
    return attrs.evolve(obj, **changes)


def test_recorded_kaggle_host_passes_everything() -> None:
    findings = check_host(PROFILE, KAGGLE, strict=True, recorded=KAGGLE)
    assert [f.status for f in findings] == ["pass"] * len(findings)
    assert {f.check for f in findings} >= {
        "Python implementation",
        "Python ABI",
        "operating system",
        "machine",
        "Python version",
        "glibc",
        "protected torch",
        "torch CUDA",
        "CUDA available to torch",
        "GPU count",
        "GPU model",
        "compute capability",
        "GPU memory",
        "NVIDIA driver",
        "driver CUDA",
        "libcuda",
        "NCCL",
    }


def test_no_target_no_findings() -> None:
    assert check_host(attrs.evolve(PROFILE, target=None), KAGGLE) == []


T4 = GpuInfo(0, "Tesla T4", "7.5", 15360)
H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 81559)

CASES: list[tuple[str, Callable[[HostSnapshot], HostSnapshot], str, str]] = [
    (
        "Python version",
        lambda h: _evolve(h, python=_evolve(h.python, version="3.12.4")),
        "expected 3.12.13; found 3.12.4",
        "use Python 3.12.13",
    ),
    (
        "glibc",
        lambda h: _evolve(h, platform=_evolve(h.platform, libc_version="2.31")),
        "expected glibc >= 2.35; found glibc 2.31",
        "glibc 2.35 or newer",
    ),
    (
        "glibc",
        lambda h: _evolve(h, platform=_evolve(h.platform, libc="musl", libc_version="1.2.4")),
        "found musl 1.2.4",
        "glibc 2.35",
    ),
    (
        "protected torch",
        lambda h: _evolve(
            h,
            distributions=[
                _evolve(d, version=Pep440Version("2.9.1+cu128")) if d.name == "torch" else d
                for d in h.distributions
            ],
        ),
        "expected 2.10.0+cu128 (the host snapshot); found 2.9.1+cu128",
        "re-lock",
    ),
    # a missing protected torch is an error even without --strict: test_host_protected.py
    (
        "torch CUDA",
        lambda h: _evolve(h, torch=_evolve(h.torch, cuda="12.6")),
        "expected 12.8; found 12.6 (torch 2.10.0+cu128)",
        "CUDA 12.8",
    ),
    (
        "torch CUDA",
        lambda h: _evolve(h, torch=_evolve(h.torch, cuda=None)),
        "found CPU-only torch",
        "built for CUDA 12.8",
    ),
    ("torch CUDA", lambda h: _evolve(h, torch=None), "found no torch", "protected"),
    (
        "CUDA available to torch",
        lambda h: _evolve(h, torch=_evolve(h.torch, cuda_available=False)),
        "expected yes; found no",
        "driver",
    ),
    (
        "GPU count",
        lambda h: _evolve(h, gpus=h.gpus[:1]),
        "expected 2 x Tesla T4; found 1 (Tesla T4)",
        "CUDA_VISIBLE_DEVICES",
    ),
    (
        "GPU count",
        lambda h: _evolve(h, gpus=[], driver=None),
        "found 0 (no NVIDIA driver)",
        "2 x Tesla T4",
    ),
    (
        "GPU count",
        lambda h: _evolve(h, gpus=[]),
        "found 0 (driver 580.159.04 sees no GPU)",
        "2 x Tesla T4",
    ),
    (
        "GPU model",
        lambda h: _evolve(h, gpus=[H100, _evolve(H100, index=1)]),
        "expected Tesla T4; found NVIDIA H100 80GB HBM3, NVIDIA H100 80GB HBM3",
        "Tesla T4",
    ),
    (
        "compute capability",
        lambda h: _evolve(h, gpus=[T4, _evolve(T4, compute_capability="8.0")]),
        "expected 7.5; found 7.5, 8.0",
        "SM 7.5",
    ),
    (
        "GPU memory",
        lambda h: _evolve(h, gpus=[T4, _evolve(T4, memory_mib=8192)]),
        "expected 15360 MiB each; found 15360 MiB, 8192 MiB",
        "gpu_memory_utilization",
    ),
    (
        "NVIDIA driver",
        lambda h: _evolve(h, driver=_evolve(h.driver, version="535.183.01")),
        "expected >= 580.159.04; found 535.183.01",
        "580.159.04 or newer",
    ),
    ("NVIDIA driver", lambda h: _evolve(h, driver=None), "found none", "install NVIDIA driver"),
    (
        "driver CUDA",
        lambda h: _evolve(h, driver=_evolve(h.driver, cuda_max="12.2")),
        "found CUDA up to 12.2",
        "supporting CUDA 12.8",
    ),
    (
        "libcuda",
        lambda h: _evolve(h, cuda=_evolve(h.cuda, libcuda=None)),
        "expected the CUDA driver library; found none",
        "/usr/local/nvidia/lib64",
    ),
    ("libcuda", lambda h: _evolve(h, cuda=None), "found none", "install the NVIDIA driver"),
    (
        "NCCL",
        lambda h: _evolve(h, torch=_evolve(h.torch, nccl="2.21.5")),
        "expected 2.27.5 (the host snapshot); found 2.21.5",
        "NCCL",
    ),
]


@pytest.mark.parametrize(("check", "change", "message", "fix"), CASES)
def test_each_check_fails_with_a_fix(
    check: str, change: Callable[[HostSnapshot], HostSnapshot], message: str, fix: str
) -> None:
    host = change(KAGGLE)
    loose = _by_check(check_host(PROFILE, host, recorded=KAGGLE))[check]
    assert loose.status == "warning"
    assert message in loose.message
    assert loose.fix is not None and fix in loose.fix
    strict = _by_check(check_host(PROFILE, host, strict=True, recorded=KAGGLE))[check]
    assert strict.status == "error"


@pytest.mark.parametrize(
    ("change", "check", "expected"),
    [
        (lambda h: _evolve(h, python=_evolve(h.python, abi="cp311")), "Python ABI", "cp311"),
        (
            lambda h: _evolve(h, python=_evolve(h.python, implementation="pypy")),
            "Python implementation",
            "pypy",
        ),
        (
            lambda h: _evolve(h, platform=_evolve(h.platform, os="darwin")),
            "operating system",
            "darwin",
        ),
        (
            lambda h: _evolve(h, platform=_evolve(h.platform, machine="aarch64")),
            "machine",
            "aarch64",
        ),
    ],
)
def test_identity_mismatches_are_always_errors(
    change: Callable[[HostSnapshot], HostSnapshot], check: str, expected: str
) -> None:
    finding = _by_check(check_host(PROFILE, change(KAGGLE), strict=False))[check]
    assert finding.status == "error"
    assert finding.message.endswith(f"found {expected}")
    assert finding.fix


def test_untested_facts() -> None:
    host = _evolve(KAGGLE, torch=_evolve(KAGGLE.torch, nccl=None, cuda_available=None))
    found = _by_check(check_host(PROFILE, host, strict=True, recorded=KAGGLE))
    assert found["NCCL"].status == "untested"
    assert found["CUDA available to torch"].status == "untested"
    assert found["NCCL"].fix is not None and "--import-torch" in found["NCCL"].fix
    no_gpus = _by_check(check_host(PROFILE, _evolve(KAGGLE, gpus=[]), recorded=KAGGLE))
    assert [no_gpus[c].status for c in ("GPU model", "compute capability", "GPU memory")] == [
        "untested"
    ] * 3
    no_cuda_max = _evolve(KAGGLE, driver=_evolve(KAGGLE.driver, cuda_max=None))
    assert _by_check(check_host(PROFILE, no_cuda_max))["driver CUDA"].status == "untested"


def test_protected_versions_against_the_recorded_snapshot() -> None:
    unknown = _evolve(
        KAGGLE,
        distributions=[
            _evolve(d, version=None) if d.name == "torch" else d for d in KAGGLE.distributions
        ],
    )
    # the live host knows torch's version, the recorded snapshot does not
    found = _by_check(check_host(PROFILE, KAGGLE, recorded=unknown))["protected torch"]
    assert found.status == "untested"
    assert "does not record its version" in found.message
    # no recorded snapshot: present is enough
    found = _by_check(check_host(PROFILE, KAGGLE, recorded=None))["protected torch"]
    assert (found.status, found.message) == (
        "pass",
        "protected torch: 2.10.0+cu128 (no host snapshot to compare)",
    )
    extra = _evolve(
        PROFILE, host=_evolve(PROFILE.host, protected=[PackageName("torch"), PackageName("Triton")])
    )
    no_triton_version = _evolve(
        KAGGLE,
        distributions=[
            _evolve(d, version=None) if d.name == "triton" else d for d in KAGGLE.distributions
        ],
    )
    found = _by_check(check_host(extra, no_triton_version, recorded=no_triton_version))[
        "protected triton"
    ]
    assert found.status == "untested"


def test_model_matches_substrings_both_ways_case_insensitively() -> None:
    profile = _evolve(
        PROFILE,
        target=_evolve(PROFILE.target, gpu=Gpu(NonEmpty("NVIDIA Tesla T4"), PositiveInt(2))),
    )
    assert _by_check(check_host(profile, KAGGLE))["GPU model"].status == "pass"
    lower = _evolve(KAGGLE, gpus=[_evolve(g, name="tesla t4") for g in KAGGLE.gpus])
    assert _by_check(check_host(PROFILE, lower))["GPU model"].status == "pass"


def test_more_gpus_than_the_target_is_fine() -> None:
    host = _evolve(KAGGLE, gpus=[*KAGGLE.gpus, _evolve(T4, index=2)])
    found = _by_check(check_host(PROFILE, host))["GPU count"]
    assert (found.status, found.message) == ("pass", "GPU count: 3 (the target has 2)")


def test_newer_driver_passes() -> None:
    host = _evolve(KAGGLE, driver=DriverInfo("590.10.1", "13.1", "nvidia-smi"))
    assert _by_check(check_host(PROFILE, host))["NVIDIA driver"].status == "pass"


T4_TARGET = Gpu(NonEmpty("Tesla T4"), PositiveInt(2), DottedVersion("7.5"), PositiveInt(15360))


def test_tensor_parallel() -> None:
    ok = check_tensor_parallel(KAGGLE.gpus, 2, T4_TARGET)
    assert ok.status == "pass"
    assert ok.message == "2 visible Tesla T4 (SM 7.5) GPU(s) support tensor_parallel_size=2"
    one = check_tensor_parallel(KAGGLE.gpus[:1], 2)
    assert one.status == "error" and "found 1 visible (Tesla T4)" in one.message
    none = check_tensor_parallel([], 2, None, None)
    assert "found no visible GPU (no NVIDIA driver)" in none.message
    assert none.fix is not None
    hopper = check_tensor_parallel([H100, _evolve(H100, index=1)], 2, T4_TARGET)
    assert hopper.status == "error"
    assert hopper.message.startswith("visible GPUs do not all match Tesla T4 / SM 7.5")
    assert check_tensor_parallel([H100], 1).status == "pass"
    # only the GPUs the ranks use must match
    assert check_tensor_parallel([T4, H100], 1, T4_TARGET).status == "pass"
