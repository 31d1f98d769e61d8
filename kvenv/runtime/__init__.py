"""kvenv's thin runtime layer over vLLM, imported only on demand (``import kvenv`` never does).

- :class:`LLM` / :class:`KaggleLLM`: ``vllm.LLM`` with a profile's defaults, keyword names
  checked against the installed vLLM, TP checked against the visible GPUs, and a guard that
  refuses a ``sharded_state`` checkpoint saved with another topology;
  ``LLM.save_sharded_model`` saves one with kvenv's manifest.
- :func:`inspect_shards`: a sharded checkpoint read from its safetensors headers alone.
- :func:`serve` / :class:`ServeConfig` / :class:`Server`: ``vllm serve`` launched safely.

Importing this package imports neither vllm nor torch; vllm is imported when an ``LLM`` is built.
"""

from __future__ import annotations

from kvenv.runtime.gpus import GpuCount, visible_gpu_count
from kvenv.runtime.llm import (
    DEFAULT_MAX_SHARD_SIZE,
    KAGGLE_PROFILE,
    LLM,
    KaggleLLM,
    accepted_keywords,
    guard_sharded_load,
    import_vllm,
    runtime_defaults,
)
from kvenv.runtime.serve import (
    ServeConfig,
    Server,
    build_argv,
    serve,
    serve_config,
    start_server,
)
from kvenv.runtime.shards import (
    PP_AND_TP_PATTERN,
    SHARD_MANIFEST_NAME,
    TP_ONLY_PATTERN,
    Shard,
    ShardInspection,
    ShardManifest,
    inspect_shards,
    read_shard_manifest,
)

__all__ = [
    "DEFAULT_MAX_SHARD_SIZE",
    "KAGGLE_PROFILE",
    "LLM",
    "PP_AND_TP_PATTERN",
    "SHARD_MANIFEST_NAME",
    "TP_ONLY_PATTERN",
    "GpuCount",
    "KaggleLLM",
    "ServeConfig",
    "Server",
    "Shard",
    "ShardInspection",
    "ShardManifest",
    "accepted_keywords",
    "build_argv",
    "guard_sharded_load",
    "import_vllm",
    "inspect_shards",
    "read_shard_manifest",
    "runtime_defaults",
    "serve",
    "serve_config",
    "start_server",
    "visible_gpu_count",
]
