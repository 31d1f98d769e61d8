"""``EngineArgs`` as a plain dataclass, with the field names of vLLM 0.33."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineArgs:
    model: str = "facebook/opt-125m"
    served_model_name: str | list[str] | None = None
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    trust_remote_code: bool = False
    download_dir: str | None = None
    load_format: str = "auto"
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    seed: int = 0
    max_model_len: int | None = None
    distributed_executor_backend: str | None = None
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float = 0.92
    kv_cache_memory_bytes: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_logprobs: int = 20
    disable_log_stats: bool = False
    revision: str | None = None
    code_revision: str | None = None
    tokenizer_revision: str | None = None
    hf_token: bool | str | None = None
    hf_overrides: dict[str, Any] | None = None
    quantization: str | None = None
    enforce_eager: bool = False
    disable_custom_all_reduce: bool = False
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    cpu_offload_gb: float = 0
    model_loader_extra_config: dict[str, Any] = field(default_factory=dict)
    ignore_patterns: list[str] | None = None
    attention_backend: str | None = None
    attention_config: dict[str, Any] | None = None
    compilation_config: dict[str, Any] | None = None
    structured_outputs_config: dict[str, Any] | None = None
    kv_transfer_config: dict[str, Any] | None = None
    runner: str = "auto"
    convert: str = "auto"
    shutdown_timeout: int = 0

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")


if __import__("os").environ.get("FAKE_VLLM_WORKER_EXTENSION"):  # for a child process of a test

    @dataclass
    class _WithExtension(EngineArgs):
        worker_extension_cls: str = ""

    _WithExtension.__name__ = _WithExtension.__qualname__ = "EngineArgs"
    EngineArgs = _WithExtension  # type: ignore[misc]
