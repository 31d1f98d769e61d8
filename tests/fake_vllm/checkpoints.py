"""Real sharded_state checkpoints for tests, written with ``safetensors`` and numpy."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "torch_dtype": "float16"}


def rank_tensors(tp: int, rank: int, *, layers: int = 2, first_layer: int = 0) -> dict:
    """TP-local tensors of one rank: sharded projections plus replicated norms."""
    value = float(rank + 1)
    tensors = {"model.embed_tokens.weight": np.full((64 // tp, 8), value, np.float16)}
    for layer in range(first_layer, first_layer + layers):
        tensors[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(8, np.float16)
        tensors[f"model.layers.{layer}.self_attn.qkv_proj.weight"] = np.full(
            (24 // tp, 8), value, np.float16
        )
        tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = np.full(
            (8, 32 // tp), value, np.float16
        )
    return tensors


def split(tensors: dict, parts: int) -> list[dict]:
    names = list(tensors)
    size = -(-len(names) // parts)
    return [{n: tensors[n] for n in names[i * size : (i + 1) * size]} for i in range(parts)]


def write_metadata(root: Path, names: Iterable[str] = ("config.json", "tokenizer_config.json")):
    for name in names:
        (root / name).write_text(json.dumps(CONFIG if name == "config.json" else {}))


def make_tp_checkpoint(root: Path, tp: int, parts: int = 1, *, metadata: bool = True) -> Path:
    """``model-rank-R-part-P.safetensors`` for ``tp`` ranks of ``parts`` parts each."""
    root.mkdir(parents=True, exist_ok=True)
    for rank in range(tp):
        for part, tensors in enumerate(split(rank_tensors(tp, rank), parts)):
            save_file(tensors, str(root / f"model-rank-{rank}-part-{part}.safetensors"))
    if metadata:
        write_metadata(root)
    return root


def make_pp_checkpoint(root: Path, tp: int, pp: int, parts: int = 1) -> Path:
    """``model-pp-S-tp-R-part-P.safetensors``: each stage holds its own layers."""
    root.mkdir(parents=True, exist_ok=True)
    for stage in range(pp):
        for rank in range(tp):
            tensors = rank_tensors(tp, rank, layers=2, first_layer=2 * stage)
            if stage:
                del tensors["model.embed_tokens.weight"]
            for part, chunk in enumerate(split(tensors, parts)):
                name = f"model-pp-{stage}-tp-{rank}-part-{part}.safetensors"
                save_file(chunk, str(root / name))
    write_metadata(root)
    return root
