"""``kvenv.runtime.LLM``: ``vllm.LLM`` with a profile's defaults, checked keywords and a guard.

vllm is imported only when an ``LLM`` is built. Before vLLM starts, every keyword is checked
against the installed vLLM (``EngineArgs`` fields and ``LLM.__init__`` parameters), the
tensor-parallel size against the visible GPUs, and a ``sharded_state`` checkpoint against the
requested topology (vLLM itself loads a checkpoint saved with another TP size and silently
narrows the weights). Everything else is delegated to the wrapped ``vllm.LLM``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
from packaging.version import Version

import kvenv.runtime.gpus as gpus
import kvenv.runtime.reloadcheck as reloadcheck
import kvenv.runtime.shardsave as shardsave
import kvenv.runtime.vllmbuild as vllmbuild
from kvenv._util.versions import parse_version
from kvenv.errors import KvenvError, Problem, RuntimeNotReady, ShardError, UsageError
from kvenv.runtime.shards import (
    PP_AND_TP_PATTERN,
    SHARD_MANIFEST_NAME,
    TP_ONLY_PATTERN,
    WEIGHT_SUFFIXES,
    ReloadRecord,
    ShardInspection,
    build_shard_manifest,
    inspect_shards,
    write_shard_manifest,
)

KAGGLE_PROFILE = "kaggle-t4x2-cu128"
DEFAULT_MAX_SHARD_SIZE = 2 * 1024**3
ATTENTION_ENV = "VLLM_ATTENTION_BACKEND"
# vLLM's CPU build: which CPUs each rank's OpenMP threads use ("0|1": rank 0 on CPU 0, rank 1 on 1)
BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
# The keywords kvenv consumes itself, whatever the installed vLLM accepts.
_OWN_KEYWORDS = frozenset({"attention_backend"})
# From this vLLM on, pipeline stages get their own file names (model-pp-S-tp-R-part-P).
_PP_PATTERN_SINCE = Version("0.32")
# vLLM's and torch's own words when there is no usable device (the first is what vLLM 0.31.0
# says on a host without a GPU: its platform is "unspecified" and torch.device("") fails).
_DEVICE_FAILURE = re.compile(
    r"device string must not be empty|failed to infer device type|found no nvidia driver"
    r"|no cuda gpus are available|no cuda-capable device|cuda driver initialization failed"
    r"|torch not compiled with cuda enabled",
    re.IGNORECASE,
)
# The profile's runtime fields that become engine keywords as they are.
_PLAIN_DEFAULTS = (
    "dtype",
    "enforce_eager",
    "disable_custom_all_reduce",
    "tensor_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
)


@attrs.frozen
class RuntimeDefaults:
    """A profile's runtime section, as the wrapper and ``serve`` use it."""

    profile: str | None
    engine: dict[str, Any]
    attention_backend: str | None
    env: dict[str, str]


def active_profile() -> str | None:
    """The profile of the active generation (``kvenv run``, ``kvenv shell``, an activated
    shell: ``$KVENV_MANIFEST``) when ``$KVENV_PROFILE`` names none: the file it was applied
    from when that still exists, else its name. None: nothing is active (the default applies)."""
    from kvenv.model.places import ENV_DEFAULT, ENV_MANIFEST

    manifest = os.environ.get(ENV_MANIFEST)
    if os.environ.get(ENV_DEFAULT) or not manifest:
        return None
    from kvenv.env.manifest import read_manifest

    try:
        ref = read_manifest(Path(manifest)).profile
    except (KvenvError, OSError):
        return None  # activation itself reports a broken manifest
    return ref.path if ref.path and os.path.isfile(ref.path) else ref.name


def runtime_defaults(profile: str | None) -> RuntimeDefaults:
    """Load ``profile`` (a name or .toml path; None: the active generation's profile, else the
    default profile) and return its runtime defaults, without the fields left unset (None
    means "don't pass")."""
    from kvenv.model.loading import load_profile

    loaded = load_profile(profile if profile is not None else active_profile())
    runtime = loaded.profile.runtime
    engine = {
        name: getattr(runtime, name)
        for name in _PLAIN_DEFAULTS
        if getattr(runtime, name) is not None
    }
    return RuntimeDefaults(
        profile=loaded.profile.name,
        engine=engine,
        attention_backend=runtime.attention_backend,
        env={str(k): v for k, v in runtime.env.items()},
    )


# --- importing vllm ----------------------------------------------------------------------------


def import_vllm(profile: str | None = None) -> ModuleType:
    """Import vllm; when it is missing, activate the applied runtime and try once more."""
    module = _try_import_vllm()
    if module is not None:
        return module
    if not activate_runtime(profile):
        raise RuntimeNotReady(
            "vLLM is not importable and no applied runtime was found",
            hint="run `kvenv apply` (with --profile to pick a profile), then try again",
        )
    importlib.invalidate_caches()
    module = _try_import_vllm()
    if module is None:
        raise RuntimeNotReady(
            "vLLM is still not importable after activating the applied runtime",
            hint="the applied runtime looks incomplete: run `kvenv apply` again",
        )
    return module


def _try_import_vllm() -> ModuleType | None:
    """vllm, or None when it is not installed; one that is but lacks a module it imports is
    refused."""
    try:
        return importlib.import_module("vllm")
    except ModuleNotFoundError as exc:
        if exc.name == "vllm":
            return None
        raise RuntimeNotReady(
            f"vLLM is installed but cannot be imported: module {exc.name!r} is missing",
            hint="the overlay is incomplete or does not match this host: run `kvenv apply` "
            "and `kvenv doctor`",
        ) from None


def activate_runtime(profile: str | None, *, check_imports: bool = True) -> bool:
    """Activate the applied runtime of ``profile`` in this process; False when there is none
    (no warning: the caller says what is missing). ``check_imports=False``: this process only
    starts others (``kvenv serve``), so what it imported does not matter."""
    try:
        from kvenv.env.activation import activate_in_process
    except ModuleNotFoundError as exc:
        if exc.name == "kvenv.env.activation":
            return False
        raise
    return bool(
        activate_in_process(
            profile=profile, manifest=None, check_imports=check_imports, warn_not_applied=False
        )
    )


# --- keywords ----------------------------------------------------------------------------------


@attrs.frozen
class Keywords:
    """What the installed vLLM accepts."""

    engine_fields: frozenset[str]
    llm_parameters: frozenset[str]

    @property
    def all(self) -> frozenset[str]:
        return self.engine_fields | self.llm_parameters | _OWN_KEYWORDS


def accepted_keywords(vllm: ModuleType) -> Keywords:
    """``EngineArgs`` fields and ``LLM.__init__`` keyword parameters of the installed vLLM."""
    engine_args = vllm.EngineArgs
    if dataclasses.is_dataclass(engine_args):
        fields = {f.name for f in dataclasses.fields(engine_args) if f.init}
    else:
        fields = _parameters(engine_args.__init__)
    return Keywords(frozenset(fields), frozenset(_parameters(vllm.LLM.__init__)))


def _parameters(func: Callable[..., Any]) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind in kinds and p.name != "self"
    }


def check_keywords(names: list[str], keywords: Keywords, version: str) -> None:
    """Refuse names the installed vLLM does not accept, each with the closest valid name."""
    valid = sorted(keywords.all)
    problems = []
    for name in names:
        if name in keywords.all:
            continue
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        fix = f"did you mean {close[0]!r}?" if close else "see `vllm serve --help` for the names"
        problems.append(Problem(f"unknown keyword argument {name!r}", path=name, fix=fix))
    if problems:
        raise UsageError(
            f"vLLM {version} does not accept " + ", ".join(repr(p.path) for p in problems),
            problems=problems,
        )


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_gpus(
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
    *,
    cpu_fix: str | None = None,
    skip_fix: str = "validate_gpus=False skips this check",
) -> None:
    """Refuse to start without a visible GPU, and a TP×PP world that needs more GPUs than are
    visible (both skipped when the count is unknown). ``cpu_fix``: how to run on the CPU
    instead, when the installed vLLM offers a way; ``skip_fix``: how the caller skips the
    check (``kvenv serve`` names its ``--no-gpu-check``)."""
    need = tensor_parallel_size * pipeline_parallel_size
    found = gpus.visible_gpu_count()
    if found.count == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        fixes = [
            "run on a machine with an NVIDIA GPU and its driver",
            "check CUDA_VISIBLE_DEVICES"
            + (f" (now {visible!r})" if visible is not None else " (unset: all GPUs)"),
            cpu_fix
            or "a CPU run needs vLLM's CPU build (the vllm-cpu distribution, as in the "
            "built-in profile cpu-x86-64)",
            skip_fix,
        ]
        raise RuntimeNotReady(
            f"no GPU is visible to this process: {found.source}; vLLM needs one",
            hint="; ".join(fixes),
        )
    if found.count is not None and need > found.count:
        what = f"tensor_parallel_size={tensor_parallel_size}"
        if pipeline_parallel_size > 1:
            what += f" × pipeline_parallel_size={pipeline_parallel_size}"
        raise UsageError(
            f"{what} requires at least {need} visible GPUs; found {found.describe()}",
            hint="lower tensor_parallel_size, or make more GPUs visible (CUDA_VISIBLE_DEVICES)",
        )


# --- the wrapper -------------------------------------------------------------------------------


class LLM:
    """``vllm.LLM`` with a profile's runtime defaults; every keyword you pass wins.

    ``profile`` is a profile name or .toml path; None means the default profile
    (``$KVENV_PROFILE``, else the built-in Kaggle profile). A keyword set to None is not passed
    to vLLM at all (vLLM's own default applies). ``validate_gpus=False`` skips the GPU count
    check. With ``distributed_executor_backend="ray"`` every node of the Ray cluster at
    ``ray_address`` (default ``$RAY_ADDRESS``, else ``auto``) must run this machine's generation
    and the cluster must have TP × PP GPUs before vLLM starts; Ray's workers then activate it
    (see docs/cluster.md). Attributes and methods not defined here are those of the wrapped
    ``vllm.LLM``.
    """

    default_profile: str | None = None

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        profile: str | None = None,
        validate_gpus: bool = True,
        ray_address: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.profile_ref = profile if profile is not None else self.default_profile
        defaults = runtime_defaults(self.profile_ref)
        self.profile: str | None = defaults.profile
        vllm = import_vllm(profile if profile is not None else self.default_profile)
        self.vllm_version: str = str(getattr(vllm, "__version__", "unknown"))
        self.vllm_build: vllmbuild.VllmBuild = vllmbuild.build_of(vllm)
        keywords = accepted_keywords(vllm)
        check_keywords(list(kwargs), keywords, self.vllm_version)
        engine, env, dropped = _merge(defaults, kwargs, keywords)
        self.dropped_defaults: tuple[str, ...] = dropped
        if (
            "worker_extension_cls" in keywords.engine_fields
            and "worker_extension_cls" not in kwargs
        ):
            # vLLM's extension point: lets save_sharded_model ask the workers which tensors
            # the model needs and save those they no longer hold (kvenv.runtime.shardsave)
            engine["worker_extension_cls"] = shardsave.EXTENSION
        tp = _positive("tensor_parallel_size", engine.get("tensor_parallel_size", 1))
        pp = _positive("pipeline_parallel_size", engine.get("pipeline_parallel_size", 1))
        if (
            validate_gpus
            and engine.get("distributed_executor_backend") in (None, "mp", "uni")
            and not _other_device(engine.get("device"), self.vllm_build)
        ):
            check_gpus(tp, pp, cpu_fix=_cpu_fix(keywords))
        self.ray_runtime_env: dict[str, Any] | None = None
        if engine.get("distributed_executor_backend") == "ray":
            # Every node runs this machine's generation, the cluster has the GPUs, and Ray's
            # workers get the activation (kvenv.cluster.workers; needs kvenv[ray]).
            from kvenv.cluster.workers import prepare_ray

            self.ray_runtime_env = prepare_ray(
                ray_address or os.environ.get("RAY_ADDRESS") or "auto",
                profile if profile is not None else self.default_profile,
                parallel=(tp, pp) if validate_gpus else None,
            )
        self.model = os.fspath(model)
        self.inspection: ShardInspection | None = None
        if engine.get("load_format") == "sharded_state":
            version = parse_version(self.vllm_version)
            self.inspection = guard_sharded_load(
                self.model, tp, pp, engine.get("model_loader_extra_config"), version
            )
        for key, value in env.items():
            if key == ATTENTION_ENV and "attention_backend" in kwargs:
                os.environ[key] = value
            else:
                os.environ.setdefault(key, value)
        ranks = tp * pp
        self.cpu_threads_bind: str | None = None  # what kvenv set, if it set anything
        if self.vllm_build.cpu and ranks > 1 and BIND_ENV not in os.environ:
            bind = cpu_threads_bind(ranks, sorted(os.sched_getaffinity(0)))
            if bind is not None:
                os.environ[BIND_ENV] = self.cpu_threads_bind = bind
        self.engine_kwargs: dict[str, Any] = dict(engine)
        # save_sharded_model saved what vLLM's loader produces from the source (emptied weights)
        self.saved_from_source = False
        self.reload_timeout: float = reloadcheck.RELOAD_TIMEOUT
        self.reload_outcome: reloadcheck.ReloadOutcome | None = None
        try:
            self.llm: Any = vllm.LLM(model=self.model, **engine)
        except Exception as exc:
            if self.vllm_build.cpu and ranks > 1:
                raise _cpu_ranks_failure(exc, ranks, self.vllm_version) from exc
            if not isinstance(exc, RuntimeError) or not _DEVICE_FAILURE.search(str(exc)):
                raise
            raise RuntimeNotReady(
                f"vLLM {self.vllm_version} could not start: it found no usable GPU "
                f"({type(exc).__name__}: {exc})",
                hint="run on a machine with an NVIDIA GPU and its driver, and check "
                "CUDA_VISIBLE_DEVICES; `kvenv doctor` shows what this host offers",
            ) from exc

    def __getattr__(self, name: str) -> Any:
        wrapped = self.__dict__.get("llm")
        if wrapped is None:
            raise AttributeError(name)
        return getattr(wrapped, name)

    def save_sharded_model(
        self,
        path: str | os.PathLike[str],
        *,
        max_size: int | None = DEFAULT_MAX_SHARD_SIZE,
        metadata_source: str | os.PathLike[str] | None = None,
        reload_check: bool = True,
    ) -> ShardInspection:
        """Save the loaded weights as a ``sharded_state`` checkpoint in ``path``, prove it and
        inspect it.

        ``path`` must not exist or be an empty directory, and must not be reached through a
        link. The source model's non-weight files (config, tokenizer, ...) are copied from
        ``metadata_source`` or the model directory (or its Hugging Face cache snapshot), then
        ``kvenv-shards.json`` records the topology and every file's size and sha256. With
        ``reload_check`` (the default) the checkpoint is reloaded in a fresh process at the same
        topology (:mod:`kvenv.runtime.reloadcheck`): a probe that generates differently removes
        it and raises :class:`ShardError` naming the first differing tensor; a reload that
        cannot run is recorded as "not reload-checked" (``self.reload_outcome`` says why).
        """
        if max_size is not None:
            _positive("max_size", max_size)
        tp = int(self.engine_kwargs.get("tensor_parallel_size", 1))
        pp = int(self.engine_kwargs.get("pipeline_parallel_size", 1))
        version = parse_version(self.vllm_version)
        if pp > 1 and (version is None or version < _PP_PATTERN_SINCE):
            raise UsageError(
                f"vLLM {self.vllm_version} cannot save a pipeline-parallel sharded checkpoint: "
                "its stages write the same file names and overwrite each other",
                hint="save with pipeline_parallel_size=1, or use vLLM 0.32 or later",
            )
        pattern = PP_AND_TP_PATTERN if pp > 1 else TP_ONLY_PATTERN
        destination = Path(path)
        source = _metadata_source(self.model, metadata_source, self.engine_kwargs.get("revision"))
        tensors = self._worker_tensors()
        save = save_route(self.llm)
        loaded_from: str | None = None
        if (tensors is not None and tensors["emptied"]) or (
            tensors is None and self.vllm_build.cpu
        ):
            save, loaded_from = self._save_loaded(tensors, pp)  # or refuse before writing
        expected = _probe(self.llm) if reload_check else None
        created = prepare_destination(destination)
        try:
            written = save(os.fspath(destination.absolute()), pattern, max_size)
            required = tensors["required"] if tensors is not None else None
            if (
                loaded_from is not None
                and isinstance(written, list)
                and all(isinstance(names, list) for names in written)
            ):
                # what a fresh instance's filtered state dict holds, which is what vLLM's
                # sharded_state loader asks for (aliases of one tensor, such as a MoE block's
                # shared expert, count once; the running model's emptied ones cannot tell)
                required = sorted({name for names in written for name in names})
            if source is not None:
                copy_metadata(source.directory, destination, allow_links_into=source.links_into)

            def manifest(record: ReloadRecord | None) -> None:
                write_shard_manifest(
                    destination,
                    build_shard_manifest(
                        destination,
                        tensor_parallel_size=tp,
                        pipeline_parallel_size=pp,
                        pattern=pattern,
                        vllm_version=self.vllm_version,
                        dtype=_text(self.engine_kwargs.get("dtype")),
                        quantization=_text(self.engine_kwargs.get("quantization")),
                        source_model=self.model,
                        required_tensors=required,
                        reload_check=record,
                    ),
                )

            manifest(None)
            saved = inspect_shards(destination, tensor_parallel_size=tp, pipeline_parallel_size=pp)
            if saved.missing_tensors:
                raise ShardError(
                    f"refusing the sharded checkpoint vLLM {self.vllm_version} wrote: "
                    + saved.missing_text(),
                    hint="nothing was kept; this vLLM does not save complete sharded state",
                )
            if expected is None:
                record = ReloadRecord("not-checked", "reload_check=False")
            else:
                record = self._reload_check(destination, expected, pattern, loaded_from)
            manifest(record)
        except BaseException as exc:
            _undo(destination, created)
            if isinstance(exc, KvenvError) or not isinstance(exc, Exception):
                raise
            raise ShardError(
                f"saving the sharded checkpoint to {destination} failed: "
                f"{type(exc).__name__}: {exc}",
                hint="nothing was kept; fix the cause and save again",
            ) from exc
        return inspect_shards(destination, tensor_parallel_size=tp, pipeline_parallel_size=pp)

    def _reload_check(
        self, destination: Path, expected: reloadcheck.Probe, pattern: str, loaded_from: str | None
    ) -> ReloadRecord:
        """Reload the written checkpoint in a fresh process and compare its probe with this
        engine's; raise (the caller removes the directory) when it differs."""
        engine = {
            k: v
            for k, v in self.engine_kwargs.items()
            if k not in ("load_format", "worker_extension_cls", "model_loader_extra_config")
        }
        source = loaded_from or (self.model if os.path.isdir(self.model) else None)
        outcome = reloadcheck.run_reload(
            destination,
            engine=engine,
            expected=expected,
            source=os.fspath(Path(source).absolute()) if source else None,
            profile=self.profile_ref,
            timeout=self.reload_timeout,
        )
        self.reload_outcome = outcome
        if outcome.status == "same":
            return ReloadRecord(
                "same",
                outcome.detail,
                vllm_version=self.vllm_version,
                prompt=reloadcheck.PROBE_PROMPT,
                token_ids=list(expected.token_ids),
                logprobs=None if expected.logprobs is None else list(expected.logprobs),
            )
        if outcome.status == "not-checked":
            return ReloadRecord("not-checked", outcome.detail, vllm_version=self.vllm_version)
        difference = outcome.difference
        if difference is None and source and self._has_extension():
            answers = self.llm.collective_rpc(
                "kvenv_first_difference",
                args=(
                    os.fspath(destination.absolute()),
                    pattern,
                    os.fspath(Path(source).absolute()),
                ),
            )
            difference = next((a for a in answers if a), {})
        raise ShardError(
            f"refusing the sharded checkpoint saved to {destination}: {outcome.detail}; "
            + reloadcheck.describe_difference(difference),
            hint="nothing was kept; the save does not reproduce this engine's weights",
        )

    def _has_extension(self) -> bool:
        return self.engine_kwargs.get("worker_extension_cls") == shardsave.EXTENSION

    def _worker_tensors(self) -> dict[str, list[str]] | None:
        """What the workers say the model needs and what they hold empty (None: this LLM
        was built without kvenv's worker extension; see kvenv.runtime.shardsave)."""
        if self.engine_kwargs.get("worker_extension_cls") != shardsave.EXTENSION:
            return None
        answers = self.llm.collective_rpc("kvenv_tensors")
        required = sorted({n for a in answers for n in a["required"]})
        emptied = sorted({n for a in answers for n in a["emptied"]})
        return {"required": required, "emptied": emptied}

    def _save_loaded(
        self, tensors: dict[str, list[str]] | None, pp: int
    ) -> tuple[SaveFunction, str]:
        """Where vLLM's own save would be incomplete (weights processed away, as vLLM's CPU
        build does): save, in every rank's worker, the state vLLM's loader produces from the
        source checkpoint (kvenv.runtime.shardsave) when that is possible, else refuse before
        anything is written. Returns the save and the source directory."""
        what = f"vLLM {self.vllm_build.describe()}"
        if tensors is None:
            reason = (
                f"{what} drops the linear layers' weights from a sharded_state save (it "
                "prepacks them for its CPU kernels), and this LLM was built without kvenv's "
                "worker extension, which could save them as vLLM's loader produces them"
            )
        else:
            reason = (
                f"{what} holds {len(tensors['emptied'])} of the model's "
                f"{len(tensors['required'])} tensors empty after processing them for its "
                f"kernels (e.g. {tensors['emptied'][0]}), so its own save would lack them"
            )
        source = Path(self.model)
        fixes = []
        if tensors is None:
            fixes.append("build the LLM without worker_extension_cls")
        if pp != 1:
            fixes.append("save with pipeline_parallel_size=1")
        if not (source.is_dir() and any(source.glob("*.safetensors"))):
            fixes.append("load the model from a local directory with its .safetensors files")
        if fixes:
            raise ShardError(
                f"cannot save a complete sharded checkpoint: {reason}; nothing was written",
                hint="; ".join([*fixes, "or save with a GPU build of vLLM"]),
            )
        rpc = self.llm.collective_rpc
        model = os.fspath(source.absolute())

        def loaded(path: str, pattern: str | None, max_size: int | None) -> object:
            return rpc(
                "kvenv_save_loaded", args=(path, pattern or TP_ONLY_PATTERN, max_size, model)
            )

        self.saved_from_source = True
        return loaded, model


class KaggleLLM(LLM):
    """:class:`LLM` bound to the ``kaggle-t4x2-cu128`` profile (2 × Tesla T4): float16, eager,
    custom all-reduce off, tensor_parallel_size 2, the Triton attention backend."""

    default_profile = KAGGLE_PROFILE


def _other_device(device: object, build: vllmbuild.VllmBuild) -> bool:
    """True when this run targets something other than an NVIDIA GPU: a ``device`` keyword
    other than cuda/auto, or a vLLM build for another platform, told by what it is (vLLM's own
    platform report, a CPU distribution such as ``vllm-cpu``, or a local version such as
    ``+cpu``/``+rocm6.3``; CUDA builds carry no local version or a ``+cuXYZ`` one)."""
    if device is not None and str(device).lower() not in ("auto", "cuda", ""):
        return True
    return build.not_cuda


def _cpu_fix(keywords: Keywords) -> str | None:
    """How the installed vLLM can be told to run on the CPU, if its arguments offer a way."""
    if "device" in keywords.engine_fields or "device" in keywords.llm_parameters:
        return "pass device='cpu' if this vLLM was built with its CPU backend"
    return None


def cpu_threads_bind(ranks: int, cpus: list[int]) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` CPU workers on the visible ``cpus``: as many
    contiguous groups, one per rank, separated by ``|`` (``0|1``, ``0-3|4-7``); the CPUs left
    over go unused. None: fewer CPUs than ranks."""
    if ranks < 1 or len(cpus) < ranks:
        return None
    size = len(cpus) // ranks
    groups = [cpus[i * size : (i + 1) * size] for i in range(ranks)]
    return "|".join(_cpu_list(group) for group in groups)


def _cpu_list(cpus: list[int]) -> str:
    runs: list[str] = []
    start = previous = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ",".join(runs)


def _cpu_ranks_failure(exc: Exception, ranks: int, version: str) -> KvenvError:
    """vLLM's CPU build failed to start ``ranks`` workers: the error, with the thread binding
    it needs (vLLM reports "Not enough allowed NUMA nodes to bind threads of N local
    CPUWorkers" in the engine's log and raises a generic error here)."""
    bind = os.environ.get(BIND_ENV)
    return RuntimeNotReady(
        f"vLLM {version} (CPU build) could not start {ranks} CPU workers: "
        f"{type(exc).__name__}: {exc}",
        hint=f"each CPU worker needs its own CPUs; by default vLLM binds one NUMA node per rank "
        f"('Not enough allowed NUMA nodes to bind threads of {ranks} local CPUWorkers' in the "
        f"log above). Set {BIND_ENV} to one CPU list per rank separated by '|' (e.g. "
        f"'0|1' or '0-3|4-7'; now {bind!r}), with at least {ranks} visible CPUs "
        f"(this process sees {len(os.sched_getaffinity(0))})",
    )


def _probe(llm: Any) -> reloadcheck.Probe:
    return reloadcheck.probe(llm)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _merge(
    defaults: RuntimeDefaults, user: Mapping[str, Any], keywords: Keywords
) -> tuple[dict[str, Any], dict[str, str], tuple[str, ...]]:
    """Profile defaults, then the user's keywords; the attention backend routed per version.

    Returns the engine keywords, the environment to set, and the profile defaults the
    installed vLLM does not know (dropped).
    """
    engine: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in defaults.engine.items():
        if name in keywords.engine_fields or name in keywords.llm_parameters:
            engine[name] = value
        else:
            dropped.append(name)
    engine.update(user)
    env = dict(defaults.env)
    backend = engine.pop("attention_backend", defaults.attention_backend)
    if backend is not None and not (
        "attention_backend" not in user and _config_names_backend(engine.get("attention_config"))
    ):
        if "attention_backend" in keywords.engine_fields:
            engine["attention_backend"] = backend
        elif "attention_config" in keywords.llm_parameters and "attention_config" not in engine:
            engine["attention_config"] = {"backend": backend}
        else:
            env[ATTENTION_ENV] = str(backend)
    return {k: v for k, v in engine.items() if v is not None}, env, tuple(dropped)


def _config_names_backend(config: object) -> bool:
    if isinstance(config, Mapping):
        return config.get("backend") is not None
    return getattr(config, "backend", None) is not None


# --- the sharded_state guard -------------------------------------------------------------------


def guard_sharded_load(
    model: str,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    loader_config: object,
    version: Version | None,
) -> ShardInspection | None:
    """Inspect a local ``sharded_state`` checkpoint and refuse a topology that does not match.

    Returns None (no check possible) for a model that is not a local directory, or when a
    custom file pattern is configured.
    """
    if isinstance(loader_config, Mapping) and "pattern" in loader_config:
        return None
    if not os.path.isdir(model):
        return None
    inspection = inspect_shards(
        model,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
    )
    problems = inspection.problems()
    if inspection.pattern == "pp-tp" and version is not None and version < _PP_PATTERN_SINCE:
        problems.append(
            Problem(
                f"vLLM {version} cannot load model-pp-*-tp-* files (that pattern needs vLLM 0.32+)",
                file=inspection.path,
            )
        )
    if problems:
        raise ShardError(
            f"refusing to load the sharded checkpoint {model}",
            problems=problems,
            hint="vLLM does not check this itself; `kvenv inspect-shards PATH` shows the details",
        )
    return inspection


# --- saving ------------------------------------------------------------------------------------

SaveFunction = Callable[[str, str | None, int | None], object]


def save_route(llm: Any) -> SaveFunction:
    """How the installed vLLM saves sharded state: ``LLM.collective_rpc`` (0.10.2+), the V1
    ``engine_core`` client, or the V0 ``model_executor``."""
    rpc = getattr(llm, "collective_rpc", None)
    if callable(rpc):

        def via_rpc(path: str, pattern: str | None, max_size: int | None) -> object:
            return rpc(
                "save_sharded_state",
                kwargs={"path": path, "pattern": pattern, "max_size": max_size},
            )

        return via_rpc
    engine = getattr(llm, "llm_engine", None)
    for holder in (getattr(engine, "engine_core", None), getattr(engine, "model_executor", None)):
        method = getattr(holder, "save_sharded_state", None)
        if callable(method):

            def via_engine(
                path: str, pattern: str | None, max_size: int | None, method: Any = method
            ) -> object:
                return method(path=path, pattern=pattern, max_size=max_size)

            return via_engine
    raise RuntimeNotReady(
        "this vLLM exposes no way to save sharded state (no LLM.collective_rpc, "
        "llm_engine.engine_core.save_sharded_state or "
        "llm_engine.model_executor.save_sharded_state)",
        hint="use a vLLM release that supports load_format='sharded_state'",
    )


def _link_in(path: Path) -> Path | None:
    """The first component of ``path`` (absolute) that is a symbolic link, if any."""
    current = Path(path.absolute().anchor)
    for part in path.absolute().parts[1:]:
        current = current / part
        if current.is_symlink():
            return current
        if not current.exists():
            return None
    return None


def prepare_destination(destination: Path) -> bool:
    """Check the save destination; create it when absent. Returns True when it was created."""
    link = _link_in(destination)
    if link is not None:
        raise ShardError(
            f"refusing a destination reached through a link: {link} -> {os.readlink(link)}",
            hint=f"pass the real path, {destination.resolve()}",
        )
    if destination.exists():
        if not destination.is_dir():
            raise ShardError(
                f"refusing to save over a file: {destination}", hint="pass a new or empty directory"
            )
        if any(destination.iterdir()):
            raise ShardError(
                f"refusing to save into a non-empty directory: {destination}",
                hint="pass a new or empty directory; nothing is merged or removed",
            )
        return False
    destination.mkdir(parents=True)
    return True


def _undo(destination: Path, created: bool) -> None:
    if created:
        shutil.rmtree(destination, ignore_errors=True)
        return
    for entry in destination.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@attrs.frozen
class MetadataSource:
    directory: Path
    links_into: Path | None = None  # links are followed only into this tree (the hub cache)


def _metadata_source(
    model: str, explicit: str | os.PathLike[str] | None, revision: object
) -> MetadataSource | None:
    if explicit is not None:
        directory = Path(explicit)
        if directory.is_symlink() or not directory.is_dir():
            raise ShardError(f"metadata_source must be a real directory: {directory}")
        return MetadataSource(directory)
    if os.path.isdir(model):
        if Path(model).is_symlink():
            raise ShardError(
                f"refusing to copy metadata from a linked model directory: {model}",
                hint="pass metadata_source= with the real directory",
            )
        return MetadataSource(Path(model))
    snapshot = _hub_snapshot(model, None if revision is None else str(revision))
    if snapshot is None:
        raise ShardError(
            f"cannot find the files of {model!r} to copy config and tokenizer from",
            hint="pass metadata_source= with a local directory holding config.json and the "
            "tokenizer files",
        )
    return MetadataSource(snapshot, links_into=snapshot.parent.parent)


def _hub_snapshot(repo: str, revision: str | None) -> Path | None:
    """The local Hugging Face cache snapshot of ``repo`` (no network), if there is one."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        found = snapshot_download(repo_id=repo, revision=revision, local_files_only=True)
    except (OSError, ValueError):  # not cached, or not a repository id
        return None
    path = Path(found)
    return path if path.is_dir() else None


def copy_metadata(source: Path, destination: Path, *, allow_links_into: Path | None = None) -> None:
    """Copy the non-weight files of ``source`` into ``destination``; refuse links (except,
    for a hub cache snapshot, links that resolve inside ``allow_links_into``)."""
    entries = [
        entry
        for entry in sorted(source.iterdir())
        if not entry.name.endswith(WEIGHT_SUFFIXES) and entry.name != SHARD_MANIFEST_NAME
    ]
    for entry in entries:
        for item in [entry, *(entry.rglob("*") if _real_dir(entry) else [])]:
            if item.is_symlink() and not _link_allowed(item, allow_links_into):
                raise ShardError(
                    f"refusing to copy a link from the source model: {item} -> {os.readlink(item)}",
                    hint="replace the link with the file, or pass metadata_source=",
                )
    for entry in entries:
        target = destination / entry.name
        if target.exists():
            continue
        if entry.is_dir():
            shutil.copytree(entry, target, symlinks=False)
        else:
            shutil.copy2(entry, target)


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _link_allowed(link: Path, root: Path | None) -> bool:
    if root is None:
        return False
    target = link.resolve()
    return target.is_relative_to(root.resolve()) and target.is_file()
