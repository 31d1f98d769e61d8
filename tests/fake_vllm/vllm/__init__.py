"""A small stand-in for the real ``vllm`` package, shaped like vLLM 0.33's public API.

It records what it is called with in :data:`CALLS` and writes real safetensors shards when
asked to save sharded state. Tests change ``__version__`` to act as other releases.
"""

from typing import Any

__version__ = "0.33.0"

# Every call the fake receives, in order: (what, details).
CALLS: list[tuple[str, dict[str, Any]]] = []

# The device type vLLM's platform detection found. "" is what the real vLLM (0.31.0) finds on a
# host without a GPU; building an LLM then fails in torch.device("") as it does there.
DEVICE_TYPE = "cuda"

from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.entrypoints.llm import LLM  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402

__all__ = ["CALLS", "LLM", "EngineArgs", "SamplingParams", "__version__"]
