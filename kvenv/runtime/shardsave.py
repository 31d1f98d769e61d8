"""Inside vLLM's workers: which tensors the model needs, and saving a complete sharded
checkpoint where the worker's own weights are no longer complete.

:class:`KvenvWorkerExtension` is vLLM's documented extension point (``worker_extension_cls``):
kvenv's ``LLM`` passes it (unless you pass your own), which mixes its methods into every worker
so ``collective_rpc`` can call them by name. Nothing of vLLM is replaced or patched.

Why: vLLM's CPU backend prepacks the linear layers' weights for its kernels and empties the
parameters (``dispatch_cpu_unquantized_gemm(remove_weight=True)``), so ``save_sharded_state``
writes a checkpoint without them that fails to load (``Missing keys``). The loader of a
``sharded_state`` checkpoint wants the weights as loaded, before that processing (it runs
the processing again after loading). :meth:`KvenvWorkerExtension.kvenv_save_from_source` writes
exactly that for a single-rank model (TP 1, PP 1): every tensor the worker still holds, and each
emptied one read from the source checkpoint, fused as the model class declares
(``packed_modules_mapping``: ``qkv_proj`` = ``q_proj``, ``k_proj``, ``v_proj`` stacked). With
more ranks the source would have to be split as vLLM splits it, which this does not attempt.

This module is imported by the workers (torch, safetensors and vllm only inside the methods).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXTENSION = "kvenv.runtime.shardsave.KvenvWorkerExtension"


def _model(worker: Any) -> Any:
    get = getattr(worker, "get_model", None)
    return get() if callable(get) else worker.model_runner.model


class KvenvWorkerExtension:
    """Methods mixed into vLLM's worker class (``self`` is the worker)."""

    def kvenv_tensors(self) -> dict[str, list[str]]:
        """The model's tensors a ``sharded_state`` load needs (``required``: every tensor of
        its state dict but those sharing another's memory), and those the worker holds empty
        (``emptied``: processed away, e.g. prepacked by the CPU backend)."""
        from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

        state = _model(self).state_dict()
        kept = ShardedStateLoader._filter_subtensors(state)
        emptied = sorted(name for name, tensor in state.items() if tensor.numel() == 0)
        return {"required": sorted(set(kept) | set(emptied)), "emptied": emptied}

    def kvenv_save_from_source(
        self, path: str, pattern: str, max_size: int | None, source: str
    ) -> list[str]:
        """Save this rank's complete state as ``sharded_state`` files in ``path``: the tensors
        the worker holds, and each emptied one from the safetensors files in ``source``. Returns
        the names written. Refuses (ValueError) more than one rank or a tensor the source
        lacks; nothing is written then."""
        import torch
        from safetensors import safe_open
        from safetensors.torch import save_file
        from vllm.distributed import get_pp_group, get_tp_group
        from vllm.model_executor.model_loader.sharded_state_loader import ShardedStateLoader

        if get_tp_group().world_size > 1 or get_pp_group().world_size > 1:
            raise ValueError("saving from the source checkpoint needs a single rank (TP 1, PP 1)")
        model = _model(self)
        packed: dict[str, list[str]] = dict(getattr(model, "packed_modules_mapping", {}) or {})
        where: dict[str, Path] = {}
        for file in sorted(Path(source).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    where.setdefault(key, file)

        def read(name: str) -> torch.Tensor:
            if name not in where:
                raise ValueError(f"the source checkpoint {source} has no tensor {name!r}")
            with safe_open(str(where[name]), framework="pt") as handle:
                tensor: torch.Tensor = handle.get_tensor(name)
                return tensor

        complete: dict[str, torch.Tensor] = {}
        for name, tensor in model.state_dict().items():
            if tensor.numel():
                complete[name] = tensor
                continue
            module, _, param = name.rpartition(".")
            parent, _, leaf = module.rpartition(".")
            prefix = f"{parent}." if parent else ""
            if leaf in packed:
                full = torch.cat([read(f"{prefix}{part}.{param}") for part in packed[leaf]])
            else:
                full = read(name)
            complete[name] = full.to(tensor.dtype).contiguous()
        state = ShardedStateLoader._filter_subtensors(complete)
        parts: list[dict[str, torch.Tensor]] = [{}]
        size = 0
        for name, tensor in state.items():
            nbytes = tensor.nelement() * tensor.element_size()
            if max_size is not None and parts[-1] and size + nbytes > max_size:
                parts.append({})
                size = 0
            parts[-1][name] = tensor
            size += nbytes
        for index, part in enumerate(parts):
            filename = ShardedStateLoader._render_default_pattern(pattern, part=index)
            save_file({k: v.contiguous() for k, v in part.items()}, str(Path(path) / filename))
        return sorted(state)
