"""Inside vLLM's workers: which tensors the model needs, saving a complete sharded checkpoint
where the worker's own weights are no longer complete, and finding a saved tensor that differs.

:class:`KvenvWorkerExtension` is vLLM's documented extension point (``worker_extension_cls``):
kvenv's ``LLM`` passes it (unless you pass your own), which mixes its methods into every worker
so ``collective_rpc`` can call them by name. Nothing of vLLM is replaced or patched.

Why: vLLM's CPU backend prepacks the linear layers' weights for its kernels and empties the
parameters (``dispatch_cpu_unquantized_gemm(remove_weight=True)``), so ``save_sharded_state``
writes a checkpoint without them that fails to load (``Missing keys``). A ``sharded_state``
load builds the model, copies the saved state dict into it and then runs vLLM's
post-processing (the prepacking) again, so what it wants is the state **as vLLM's loader
leaves it, before that processing**. :meth:`KvenvWorkerExtension.kvenv_save_loaded` produces
exactly that, in each rank's worker, with vLLM's own code only:

1. ``initialize_model`` (``vllm.model_executor.model_loader.utils``, the function every loader
   uses) builds a second instance of the model class with the worker's own ``VllmConfig``; the
   tensor-parallel rank and world size come from the worker's process groups, so each rank
   gets its own slice;
2. the model class's ``load_weights`` (the method vLLM's default loader calls) reads the source
   checkpoint's safetensors files: it renames, transposes (GPT-2's Conv1D), fuses
   (``qkv_proj``, ``gate_up_proj``), splits per rank and pads (vocabulary) exactly as for a
   normal load; ``process_weights_after_loading`` is **not** run, so nothing is prepacked;
3. ``ShardedStateLoader.save_model`` (vLLM's public static save) writes that instance's state
   with the explicit pattern ``model-rank-{rank}-part-{part}.safetensors``, which vLLM renders
   itself on every version (0.31 formats ``rank``/``part``; 0.32+ validates and formats).

Source tensors are never copied as stored. While the second instance is built, the config's
``static_forward_context`` (where attention layers register by name and refuse duplicates) is
swapped for an empty dict and restored afterwards; the running model is untouched. The instance
costs one more copy of the rank's weights in memory while saving.

This module is imported by the workers (torch, safetensors and vllm only inside the methods).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EXTENSION = "kvenv.runtime.shardsave.KvenvWorkerExtension"


def _model(worker: Any) -> Any:
    get = getattr(worker, "get_model", None)
    return get() if callable(get) else worker.model_runner.model


def _filter(state: dict[str, Any]) -> dict[str, Any]:
    """vLLM's own filter of tensors sharing memory (``ShardedStateLoader._filter_subtensors``,
    present from 0.10.2 to 0.33), version-checked: without it, every non-empty tensor."""
    from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

    method = getattr(ShardedStateLoader, "_filter_subtensors", None)
    if callable(method):
        kept: dict[str, Any] = method(state)
        return kept
    return {name: tensor for name, tensor in state.items() if tensor.numel()}


def _safetensors_weights(source: str) -> Iterator[tuple[str, Any]]:
    from safetensors import safe_open

    files = sorted(Path(source).glob("*.safetensors"))
    if not files:
        raise ValueError(f"the source model {source} has no .safetensors files")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield key, handle.get_tensor(key)


def _rank_files(path: str, pattern: str) -> list[str]:
    from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank

    rank = get_tensor_model_parallel_rank()
    stage = getattr(get_pp_group(), "rank_in_group", 0)
    rendered = pattern.format(rank=rank, tp_rank=rank, pp_rank=stage, part="*")
    return sorted(glob.glob(os.path.join(path, rendered)), key=_part_number)


def _part_number(name: str) -> tuple[int, str]:
    stem = name.rsplit("-part-", 1)[-1].split(".", 1)[0]
    return (int(stem), name) if stem.isdigit() else (1 << 30, name)


class KvenvWorkerExtension:
    """Methods mixed into vLLM's worker class (``self`` is the worker)."""

    def kvenv_tensors(self) -> dict[str, list[str]]:
        """The model's tensors a ``sharded_state`` load needs (``required``: every tensor of
        its state dict but those sharing another's memory), and those the worker holds empty
        (``emptied``: processed away, e.g. prepacked by the CPU backend)."""
        state = _model(self).state_dict()
        kept = _filter(state)
        emptied = sorted(name for name, tensor in state.items() if tensor.numel() == 0)
        return {"required": sorted(set(kept) | set(emptied)), "emptied": emptied}

    def _kvenv_loaded_model(self, source: str) -> Any:
        """A fresh instance of the worker's model class with the source checkpoint loaded
        through the class's own ``load_weights``, not post-processed (see the module doc)."""
        import torch
        from vllm.model_executor.model_loader.utils import initialize_model

        worker: Any = self
        config: Any = getattr(worker, "vllm_config", None) or worker.model_runner.vllm_config
        compilation = config.compilation_config
        registered = compilation.static_forward_context
        compilation.static_forward_context = {}
        previous = torch.get_default_dtype()
        device = torch.device(config.device_config.device)
        try:
            torch.set_default_dtype(config.model_config.dtype)
            with device:
                model = initialize_model(vllm_config=config)
        finally:
            torch.set_default_dtype(previous)
            compilation.static_forward_context = registered
        model.load_weights(_safetensors_weights(source))
        return model.eval()

    def kvenv_save_loaded(
        self, path: str, pattern: str, max_size: int | None, source: str
    ) -> list[str]:
        """Save this rank's state as vLLM's loader produces it from ``source`` (not
        post-processed) as ``sharded_state`` files in ``path`` with vLLM's own
        ``ShardedStateLoader.save_model``. Returns the names written."""
        from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

        model = self._kvenv_loaded_model(source)
        try:
            ShardedStateLoader.save_model(model, path, pattern=pattern, max_size=max_size)
            return sorted(_filter(model.state_dict()))
        finally:
            del model

    def kvenv_first_difference(self, path: str, pattern: str, source: str) -> dict[str, Any]:
        """Compare this rank's saved tensors in ``path`` with what vLLM's loader produces from
        ``source``: the first tensor (in file order) that differs in shape or value, or is
        missing or extra. ``{}`` when every tensor is equal."""
        import torch
        from safetensors import safe_open

        expected = _filter(self._kvenv_loaded_model(source).state_dict())
        seen: set[str] = set()
        for file in _rank_files(path, pattern):
            with safe_open(file, framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118
                    seen.add(key)
                    name = os.path.basename(file)
                    if key not in expected:
                        return {"tensor": key, "file": name, "what": "not a tensor of the model"}
                    saved, wanted = handle.get_tensor(key), expected[key]
                    if tuple(saved.shape) != tuple(wanted.shape):
                        return {
                            "tensor": key,
                            "file": name,
                            "what": f"shape {list(saved.shape)}, vLLM loads {list(wanted.shape)}",
                        }
                    if not torch.equal(saved.to(wanted.dtype), wanted):
                        diff = (saved.to(torch.float32) - wanted.to(torch.float32)).abs().max()
                        return {
                            "tensor": key,
                            "file": name,
                            "what": f"values differ from what vLLM loads (max |diff| "
                            f"{float(diff):.3g})",
                        }
        missing = sorted(set(expected) - seen)
        if missing:
            return {"tensor": missing[0], "file": None, "what": "missing from the checkpoint"}
        return {}
