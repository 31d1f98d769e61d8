"""Run under `kvenv run` on the host interpreter: generate twice at temperature 0, save a sharded
checkpoint, reload it with load_format="sharded_state" and generate again; a reload with another
topology must be refused. Prints one JSON line, prefixed RESULT, for the test to read.

No workaround of vLLM's CPU build is written here: the KV cache space and the dtype come from
the profile (kvenv.runtime), the entry point guard is what any vLLM script needs (spawn)."""

import json
import sys

from kvenv.errors import ShardError
from kvenv.runtime import LLM

PROMPTS = ["The overlay", "kvenv applies a pinned"]


def generate(llm: LLM) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params, use_tqdm=False)]


def main(model: str, sharded: str) -> None:
    llm = LLM(model, max_model_len=128, seed=0)
    first, second = generate(llm), generate(llm)
    inspection = llm.save_sharded_model(sharded)
    result = {
        "build": llm.vllm_build.describe(),
        "engine": {k: v for k, v in llm.engine_kwargs.items() if k != "worker_extension_cls"},
        "first": first,
        "second": second,
        "saved_from_source": llm.saved_from_source,
        "saved_valid": inspection.valid,
        "saved_tensors": inspection.tensor_count,
    }
    del llm
    import gc

    gc.collect()
    try:
        LLM(sharded, load_format="sharded_state", tensor_parallel_size=2, max_model_len=128)
    except ShardError as exc:
        result["mismatch_refused"] = str(exc)
        result["mismatch_problems"] = [p.render() for p in exc.problems]
    reloaded = LLM(sharded, load_format="sharded_state", max_model_len=128, seed=0)
    result["reloaded"] = generate(reloaded)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
