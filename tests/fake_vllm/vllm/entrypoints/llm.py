"""``LLM`` shaped like vLLM 0.33's: explicit keyword parameters, the rest into ``EngineArgs``
(an unknown name raises ``TypeError`` as the real one does), ``collective_rpc`` and an
``llm_engine`` whose ``engine_core`` can save sharded state.

``generate`` with sampling parameters returns token ids computed from the weights the engine
holds: the fake's own ``rank_state`` for a normal load, the files' tensors for a
``sharded_state`` load; so a reloaded checkpoint generates the same tokens exactly when it
holds the same tensors. ``FAKE_VLLM_RELOAD_DIFFERS=1`` makes a ``sharded_state`` load
generate other tokens. kvenv's worker extension methods are answered as the real ones would
(``kvenv_save_loaded`` writes ``rank_state``; ``kvenv_first_difference`` compares the files
with it)."""

import glob
import hashlib
import os
import re
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

import numpy as np
import vllm
from safetensors.numpy import save_file
from vllm.engine.arg_utils import EngineArgs

TP_ONLY_PATTERN = "model-rank-{rank}-part-{part}.safetensors"
PP_AND_TP_PATTERN = "model-pp-{pp_rank}-tp-{tp_rank}-part-{part}.safetensors"

HIDDEN = 16
INTERMEDIATE = 32
VOCAB_PADDED = 128
LAYERS = 4


def rank_state(tp: int, tp_rank: int, pp: int, pp_rank: int, dtype: str) -> dict[str, Any]:
    """The TP-local weights one worker holds (vLLM module names, fused projections)."""
    np_dtype = np.float32 if dtype in ("float32", "float") else np.float16
    value = float(tp_rank + 1) + 0.5 * pp_rank
    state: dict[str, Any] = {}

    def put(name: str, shape: tuple[int, ...]) -> None:
        state[name] = np.full(shape, value, dtype=np_dtype)

    per_stage = LAYERS // pp
    if pp_rank == 0:
        put("model.embed_tokens.weight", (VOCAB_PADDED // tp, HIDDEN))
    for layer in range(pp_rank * per_stage, (pp_rank + 1) * per_stage):
        prefix = f"model.layers.{layer}"
        put(f"{prefix}.input_layernorm.weight", (HIDDEN,))
        put(f"{prefix}.self_attn.qkv_proj.weight", (3 * HIDDEN // tp, HIDDEN))
        put(f"{prefix}.self_attn.o_proj.weight", (HIDDEN, HIDDEN // tp))
        put(f"{prefix}.mlp.gate_up_proj.weight", (2 * INTERMEDIATE // tp, HIDDEN))
        put(f"{prefix}.mlp.down_proj.weight", (HIDDEN, INTERMEDIATE // tp))
    if pp_rank == pp - 1:
        put("model.norm.weight", (HIDDEN,))
        put("lm_head.weight", (VOCAB_PADDED // tp, HIDDEN))
    return state


def save_sharded_state(
    args: EngineArgs, path: str, pattern: str | None, max_size: int | None
) -> None:
    """What every worker's ``save_sharded_state`` does, for all workers of the world."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if pattern is None:
        newer = tuple(int(p) for p in vllm.__version__.split(".")[:2]) >= (0, 32)
        pattern = PP_AND_TP_PATTERN if newer and pp > 1 else TP_ONLY_PATTERN
    for pp_rank in range(pp):
        for tp_rank in range(tp):
            state = rank_state(tp, tp_rank, pp, pp_rank, args.dtype)
            part, size, current = 0, 0, {}
            for name, tensor in state.items():
                if max_size is not None and size + tensor.nbytes > max_size:
                    _write(path, pattern, pp_rank, tp_rank, part, current)
                    part, size, current = part + 1, 0, {}
                current[name] = tensor
                size += tensor.nbytes
            _write(path, pattern, pp_rank, tp_rank, part, current)


def _write(path: str, pattern: str, pp_rank: int, tp_rank: int, part: int, tensors: dict) -> None:
    name = pattern.format(rank=tp_rank, tp_rank=tp_rank, pp_rank=pp_rank, part=part)
    save_file(tensors, os.path.join(path, name))


class _EngineCore:
    def __init__(self, args: EngineArgs) -> None:
        self.args = args

    def save_sharded_state(
        self, path: str, pattern: str | None = None, max_size: int | None = None
    ) -> None:
        vllm.CALLS.append(
            (
                "engine_core.save_sharded_state",
                {"path": path, "pattern": pattern, "max_size": max_size},
            )
        )
        save_sharded_state(self.args, path, pattern, max_size)


class LLMEngine:
    def __init__(self, args: EngineArgs) -> None:
        self.engine_core = _EngineCore(args)


class LLM:
    def __init__(
        self,
        model: str,
        *,
        runner: str = "auto",
        convert: str = "auto",
        tokenizer: str | None = None,
        tokenizer_mode: str = "auto",
        trust_remote_code: bool = False,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        quantization: str | None = None,
        revision: str | None = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.92,
        cpu_offload_gb: float = 0,
        enforce_eager: bool = False,
        disable_custom_all_reduce: bool = False,
        hf_token: bool | str | None = None,
        hf_overrides: dict | None = None,
        compilation_config: dict | None = None,
        attention_config: dict | None = None,
        kv_cache_memory_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        explicit = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__")}
        if "disable_log_stats" not in kwargs:
            kwargs["disable_log_stats"] = True
        self.engine_args = EngineArgs(**explicit, **kwargs)  # TypeError on an unknown name
        if not vllm.DEVICE_TYPE:
            raise RuntimeError("Device string must not be empty")  # torch.device("")
        vllm.CALLS.append(
            (
                "LLM.__init__",
                {
                    "kwargs": {k: v for k, v in explicit.items() if v is not None} | kwargs,
                    "env": {"VLLM_ATTENTION_BACKEND": os.environ.get("VLLM_ATTENTION_BACKEND")},
                },
            )
        )
        self.llm_engine = LLMEngine(self.engine_args)

    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict | None = None,
    ) -> list[Any]:
        vllm.CALLS.append(("LLM.collective_rpc", {"method": method, "kwargs": dict(kwargs or {})}))
        extension = (
            getattr(self.engine_args, "worker_extension_cls", None)
            == "kvenv.runtime.shardsave.KvenvWorkerExtension"
        )
        if extension and method == "kvenv_save_loaded":
            path, pattern, max_size, _source = args
            save_sharded_state(self.engine_args, path, pattern, max_size)
            tp, pp = self.engine_args.tensor_parallel_size, self.engine_args.pipeline_parallel_size
            dtype = self.engine_args.dtype
            return [sorted(rank_state(tp, r, pp, s, dtype)) for s in range(pp) for r in range(tp)]
        if extension and method == "kvenv_first_difference":
            return [_first_difference(self.engine_args, args[0])]
        if method != "save_sharded_state":
            raise AttributeError(f"workers have no method {method!r}")
        params = dict(kwargs or {})
        world = self.engine_args.tensor_parallel_size * self.engine_args.pipeline_parallel_size
        save_sharded_state(
            self.engine_args, params["path"], params.get("pattern"), params.get("max_size")
        )
        return [None] * world

    def generate(
        self, prompts: Any, sampling_params: Any = None, use_tqdm: bool = True
    ) -> list[Any]:
        vllm.CALLS.append(("LLM.generate", {"prompts": prompts}))
        items = [prompts] if isinstance(prompts, str) else list(prompts)
        if sampling_params is None:
            return [f"echo: {p}" for p in items]
        digest = hashlib.sha256(_weights(self.engine_args)).digest()
        if self.engine_args.load_format == "sharded_state" and os.environ.get(
            "FAKE_VLLM_RELOAD_DIFFERS"
        ):
            digest = hashlib.sha256(digest).digest()
        ids = [b % 100 for b in digest[: sampling_params.max_tokens]]
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [{t: SimpleNamespace(logprob=-t / 100)} for t in ids]
        return [
            SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=logprobs)])
            for _ in items
        ]

    def get_config(self) -> dict[str, Any]:
        return asdict(self.engine_args)


def _held(args: EngineArgs) -> dict[tuple[int, int], dict[str, Any]]:
    """The tensors each (stage, rank) holds: loaded from the files of a sharded_state
    checkpoint, else the fake's own weights."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    if args.load_format != "sharded_state":
        return {(s, r): rank_state(tp, r, pp, s, args.dtype) for s in range(pp) for r in range(tp)}
    from safetensors.numpy import load_file

    held: dict[tuple[int, int], dict[str, Any]] = {}
    for file in sorted(glob.glob(os.path.join(args.model, "model-*.safetensors"))):
        numbers = [int(n) for n in re.findall(r"[0-9]+", os.path.basename(file))]
        stage, rank = (numbers[0], numbers[1]) if "-pp-" in file else (0, numbers[0])
        held.setdefault((stage, rank), {}).update(load_file(file))
    return held


def _weights(args: EngineArgs) -> bytes:
    data = b""
    for key, tensors in sorted(_held(args).items()):
        for name in sorted(tensors):
            data += repr(key).encode() + name.encode() + tensors[name].astype(np.float32).tobytes()
    return data


def _first_difference(args: EngineArgs, path: str) -> dict[str, Any]:
    from safetensors.numpy import load_file

    expected = rank_state(1, 0, 1, 0, args.dtype)
    for file in sorted(glob.glob(os.path.join(path, "model-rank-0-part-*.safetensors"))):
        for name, tensor in load_file(file).items():
            if not np.array_equal(tensor, expected[name]):
                what = "values differ from what vLLM loads"
                return {"tensor": name, "file": os.path.basename(file), "what": what}
    return {}
