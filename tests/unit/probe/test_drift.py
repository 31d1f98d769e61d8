"""Host drift (kvenv.probe.drift): recorded snapshots that differ from the built-in Kaggle
profile's in torch, CUDA, Python and ordinary packages, judged against its real lock; each
verdict names the change and the fix; and the same verdicts through plan and doctor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from kvenv.cli import main
from kvenv.lock.input import profile_lock
from kvenv.model.fields import NonEmpty, Pep440Version
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import HostSnapshot, read_snapshot, snapshot_to_dict
from kvenv.plan.make import drift_context, make_plan
from kvenv.probe.checks import Finding
from kvenv.probe.drift import Reliance, drift_findings, host_changes

LOADED = load_profile("kaggle-t4x2-cu128")
assert LOADED.snapshot_path is not None
RECORDED = read_snapshot(LOADED.snapshot_path)
LOCK = profile_lock(LOADED)
assert LOCK is not None
CONTEXT = drift_context(LOADED, LOCK.lockfile)
RELOCK = (
    "re-fingerprint the host (`kvenv fingerprint --save profiles/kaggle-t4x2-cu128.host.json` "
    "on it) and re-lock (`kvenv lock kaggle-t4x2-cu128`)"
)


def _with_versions(snap: HostSnapshot, **versions: str | None) -> HostSnapshot:
    """``snap`` with these distributions at these versions (None: removed)."""
    dists = []
    for dist in snap.distributions:
        key = dist.name.lower().replace("_", "-")
        if key in versions:
            if versions[key] is None:
                continue
            dist = attrs.evolve(dist, version=Pep440Version(str(versions[key])), note=None)
        dists.append(dist)
    return attrs.evolve(snap, distributions=dists)


def _drift(live: HostSnapshot, *, strict: bool = False) -> list[Finding]:
    found = drift_findings(RECORDED, live, CONTEXT, strict=strict)
    assert all(f.check == "host drift" for f in found)
    return found


def _bad(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.status != "pass"]


def test_the_recorded_host_itself_has_no_drift() -> None:
    assert host_changes(RECORDED, RECORDED) == []
    (only,) = _drift(RECORDED)
    assert only.status == "pass"
    assert only.message == (
        "host drift: none: this host matches the snapshot profiles/kaggle-t4x2-cu128.host.json; "
        "the lock holds"
    )


def test_a_new_torch_needs_a_native_build() -> None:
    assert RECORDED.torch is not None
    live = attrs.evolve(
        _with_versions(RECORDED, torch="2.11.0+cu128"),
        torch=attrs.evolve(RECORDED.torch, version="2.11.0+cu128"),
    )
    (finding,) = _bad(_drift(live))
    assert finding.status == "error"
    assert finding.message.startswith("host drift: torch 2.10.0+cu128 -> 2.11.0+cu128:")
    assert "bound to torch 2.10.0+cu128's ABI" in finding.message
    assert finding.fix == (
        "build the native wheel for torch 2.11.0+cu128 on this image, pin it in [native], then "
        + RELOCK
    )


def test_torch_for_another_cuda_needs_a_native_build() -> None:
    assert RECORDED.torch is not None
    live = attrs.evolve(RECORDED, torch=attrs.evolve(RECORDED.torch, cuda="13.0"))
    (finding,) = _bad(_drift(live))
    assert finding.status == "error"
    assert "torch CUDA 12.8 -> 13.0" in finding.message
    assert finding.fix == f"build the native wheel for CUDA 13.0, pin it, then {RELOCK}"


def test_a_new_cuda_toolkit_or_driver_keeps_the_lock() -> None:
    assert RECORDED.cuda is not None and RECORDED.driver is not None
    live = attrs.evolve(
        RECORDED,
        cuda=attrs.evolve(RECORDED.cuda, toolkit_version="12.9.41"),
        driver=attrs.evolve(RECORDED.driver, version="590.10.01"),
    )
    found = _bad(_drift(live))
    assert [(f.status, f.message.split(":")[1].strip()) for f in found] == [
        ("warning", "NVIDIA driver 580.159.04 -> 590.10.01"),
        ("warning", "CUDA toolkit 12.8.93 -> 12.9.41"),
    ]
    assert all("the lock still holds" in f.message for f in found)
    assert all(f.fix == f"record it: {RELOCK}" for f in found)
    # an older driver than the target's minimum does not
    old = attrs.evolve(RECORDED, driver=attrs.evolve(RECORDED.driver, version="570.1.2"))
    (finding,) = _bad(_drift(old))
    assert finding.status == "error" and "below the target's minimum 580.159.04" in finding.message
    assert finding.fix == "use a host with driver >= 580.159.04"


def test_a_new_python_minor_breaks_the_lock_a_new_patch_does_not() -> None:
    live = attrs.evolve(RECORDED, python=attrs.evolve(RECORDED.python, version=NonEmpty("3.13.15")))
    (finding,) = _bad(_drift(live))
    assert finding.status == "error"
    assert finding.message == (
        "host drift: Python 3.12.13 -> 3.13.15: the lock does not hold (its wheels, markers and "
        "the native wheel are for Python 3.12.13)"
    )
    assert finding.fix == (
        f"make a profile for Python 3.13.15: a native wheel built for it, then {RELOCK}"
    )
    patch = attrs.evolve(
        RECORDED, python=attrs.evolve(RECORDED.python, version=NonEmpty("3.12.14"))
    )
    (finding,) = _bad(_drift(patch))
    assert finding.status == "warning" and "the lock still holds" in finding.message
    (finding,) = _bad(_drift(patch, strict=True))
    assert finding.status == "error"


def test_an_ordinary_package_that_still_fits() -> None:
    # fsspec: huggingface-hub 0.36.2 (locked) needs fsspec>=2023.5.0 from the host
    (finding,) = _bad(_drift(_with_versions(RECORDED, fsspec="2026.9.0")))
    assert finding.status == "warning"
    assert finding.message == (
        "host drift: 1 distribution the lock relies on the host for changed and still fits what "
        "it needs, so the lock holds: fsspec 2025.3.0 -> 2026.9.0 (needed: fsspec>=2023.5.0 "
        "(huggingface-hub 0.36.2))"
    )
    assert finding.fix == f"record the new versions: {RELOCK}"


def test_an_ordinary_package_that_no_longer_fits() -> None:
    (finding,) = _bad(_drift(_with_versions(RECORDED, numpy="2.4.0")))
    assert finding.status == "error"
    assert "numpy 2.0.2 -> 2.4.0, which does not satisfy" in finding.message
    assert "numpy<2.3,>=1.24 (numba 0.61.2)" in finding.message
    assert "so the lock does not hold" in finding.message
    assert finding.fix == f"{RELOCK}; the re-resolve puts a fitting version in the overlay"


def test_an_ordinary_package_that_is_gone() -> None:
    (finding,) = _bad(_drift(_with_versions(RECORDED, pyzmq=None)))
    assert finding.status == "error"
    assert "1 distribution the lock relies on the host for is gone from the host" in (
        finding.message
    )
    assert "pyzmq (was 26.2.1; needed: pyzmq>=25.0.0 (vllm " in finding.message
    assert finding.fix == f"{RELOCK}; the re-resolve puts it in the overlay"


def test_an_assumption_the_real_host_breaks_is_caught() -> None:
    # blake3 is recorded with an unknown version; any version fits vLLM's bare `blake3`
    found = _bad(_drift(_with_versions(RECORDED, blake3="1.0.5")))
    assert found == []
    # were it `blake3>=2`, the host's 1.0.5 breaks the assumption the lock was made on
    stricter = attrs.evolve(
        CONTEXT,
        reliances=(*CONTEXT.reliances, Reliance("blake3", "blake3>=2", "vllm (example)")),
    )
    found = drift_findings(RECORDED, _with_versions(RECORDED, blake3="1.0.5"), stricter)
    (finding,) = _bad(found)
    assert finding.status == "error"
    assert "blake3 1.0.5 (recorded: version unknown), which does not satisfy blake3>=2" in (
        finding.message
    )
    # an unrelated package and one the overlay shadows: the lock holds
    found = _drift(_with_versions(RECORDED, **{"absl-py": "2.0.0", "transformers": "5.1.0"}))
    (finding,) = found
    assert finding.status == "pass"
    assert "2 other distribution(s) differ" in finding.message
    assert "the overlay installs 1 of them and shadows the host's" in finding.message


def _snapshot_file(tmp_path: Path, snap: HostSnapshot) -> str:
    path = tmp_path / "host.json"
    path.write_text(json.dumps(snapshot_to_dict(snap)))
    return str(path)


def test_plan_and_doctor_say_what_changed_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert RECORDED.torch is not None
    live = attrs.evolve(
        _with_versions(RECORDED, torch="2.11.0+cu128", numpy="2.4.0"),
        torch=attrs.evolve(RECORDED.torch, version="2.11.0+cu128"),
    )
    plan = make_plan(LOADED, LOCK, live, None, recorded=RECORDED)
    drift = [f for f in plan.findings if f.check == "host drift"]
    assert [f.status for f in drift] == ["error", "error"]
    assert not plan.compatible
    host = _snapshot_file(tmp_path, live)
    code = main(["doctor", "kaggle-t4x2-cu128", "--host", host])
    out = capsys.readouterr().out
    assert code == 1
    assert "ERROR    host drift: torch 2.10.0+cu128 -> 2.11.0+cu128" in out
    assert "fix: build the native wheel for torch 2.11.0+cu128" in out
    assert "numpy 2.0.2 -> 2.4.0, which does not satisfy" in out
    code = main(["plan", "kaggle-t4x2-cu128", "--host", host, "--json"])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    messages = [f["message"] for f in data["findings"] if f["check"] == "host drift"]
    assert any("torch 2.10.0+cu128 -> 2.11.0+cu128" in m for m in messages)
    assert code != 0


def test_what_the_host_never_had_is_no_drift() -> None:
    """A requirement the lock leaves to the host that the recorded host did not have either
    (waived, or an optional dependency) is not "gone": found by the real vLLM end-to-end run,
    whose profile waives torchcodec."""
    reliance = Reliance("never-there", "never-there>=1", "nativepkg 1.0")
    context = attrs.evolve(CONTEXT, reliances=(*CONTEXT.reliances, reliance))
    assert RECORDED.find("never-there") is None
    found = drift_findings(RECORDED, RECORDED, context)
    assert _bad(found) == [], [f.message for f in found]


def test_a_waived_requirement_is_not_left_to_the_host() -> None:
    from kvenv.model.profile import Waiver

    relied = sorted({r.name for r in CONTEXT.reliances})
    assert relied, "the Kaggle lock leaves something to the host"
    name = relied[0]
    host = attrs.evolve(
        LOADED.profile.host,
        waivers=[*LOADED.profile.host.waivers, Waiver(name=name, reason="not needed here")],
    )
    loaded = attrs.evolve(LOADED, profile=attrs.evolve(LOADED.profile, host=host))
    assert LOCK is not None
    context = drift_context(loaded, LOCK.lockfile)
    assert name not in {r.name for r in context.reliances}
