"""Checks against a real vLLM (opt-in: ``pytest -m e2e``; skipped where vLLM is not importable).

They need no GPU and load no model: keyword names are validated against the installed
``EngineArgs`` before vLLM starts, and kvenv's file patterns are compared with vLLM's own.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from packaging.version import Version

from kvenv.errors import UsageError
from kvenv.runtime.llm import LLM, accepted_keywords, check_keywords
from kvenv.runtime.shards import PP_AND_TP_PATTERN, TP_ONLY_PATTERN

pytestmark = pytest.mark.e2e

vllm = pytest.importorskip("vllm")
if Path(vllm.__file__ or "").parent.parent.name == "fake_vllm":
    pytest.skip("the fake vllm is on sys.path, not the real one", allow_module_level=True)


def test_common_keywords_are_accepted() -> None:
    keywords = accepted_keywords(vllm)
    for name in (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "dtype",
        "enforce_eager",
        "load_format",
        "max_model_len",
        "gpu_memory_utilization",
        "quantization",
        "model_loader_extra_config",
        "distributed_executor_backend",
    ):
        assert name in keywords.all, name
    check_keywords(["tensor_parallel_size", "dtype"], keywords, vllm.__version__)


def test_misspelling_refused_before_vllm_starts() -> None:
    with pytest.raises(UsageError) as info:
        LLM(
            "facebook/opt-125m",
            profile="kaggle-t4x2-cu128",
            validate_gpus=False,
            tensor_paralel_size=1,
        )
    (problem,) = info.value.problems
    assert problem.fix == "did you mean 'tensor_parallel_size'?"


def test_removed_keywords_are_refused() -> None:
    if Version(vllm.__version__).release < (0, 20):
        pytest.skip("swap_space still exists in this vLLM")
    with pytest.raises(UsageError, match="swap_space"):
        LLM("facebook/opt-125m", profile="kaggle-t4x2-cu128", validate_gpus=False, swap_space=4)


def test_attention_backend_route_matches_the_version() -> None:
    keywords = accepted_keywords(vllm)
    has_field = "attention_backend" in keywords.engine_fields
    assert has_field == (Version(vllm.__version__).release >= (0, 14))


def test_file_patterns_match_vllm() -> None:
    module = importlib.import_module("vllm.model_executor.model_loader.sharded_state_loader")
    loader = module.ShardedStateLoader
    if hasattr(loader, "TP_ONLY_PATTERN"):
        assert loader.TP_ONLY_PATTERN == TP_ONLY_PATTERN
        assert loader.PP_AND_TP_PATTERN == PP_AND_TP_PATTERN
    else:
        assert loader.DEFAULT_PATTERN == TP_ONLY_PATTERN
