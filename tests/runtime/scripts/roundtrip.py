"""Run under `kvenv run` on the host interpreter: generate twice at temperature 0, save a sharded
checkpoint (kvenv reloads it in a fresh process and compares a probe: the reload check), then
show that a reload with another topology is refused. Prints one JSON line, prefixed RESULT, for
the test to read. Usage: roundtrip.py MODEL SHARDED [TP]

No workaround of vLLM's CPU build is written here: the KV cache space and the dtype come from
the profile (kvenv.runtime), the CPU binding of TP ranks from the wrapper, the entry point guard
is what any vLLM script needs (spawn)."""

import json
import os
import sys
import time

from kvenv.errors import ShardError
from kvenv.runtime import LLM

PROMPTS = ["The overlay", "kvenv applies a pinned"]


def generate(llm: LLM) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params, use_tqdm=False)]


def main(model: str, sharded: str, tp: int) -> None:
    started = time.monotonic()
    llm = LLM(model, max_model_len=128, seed=0, tensor_parallel_size=tp)
    first, second = generate(llm), generate(llm)
    generated = time.monotonic()
    inspection = llm.save_sharded_model(sharded)
    outcome = llm.reload_outcome
    result = {
        "build": llm.vllm_build.describe(),
        "engine": {k: v for k, v in llm.engine_kwargs.items() if k != "worker_extension_cls"},
        "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "bind_by_kvenv": llm.cpu_threads_bind,
        "first": first,
        "second": second,
        "saved_from_source": llm.saved_from_source,
        "verdict": inspection.verdict,
        "reload": None if outcome is None else [outcome.status, outcome.detail],
        "probe": None if outcome is None or outcome.found is None else outcome.found.to_json(),
        "saved_tensors": inspection.tensor_count,
        "files": sorted(s.name for s in inspection.shards),
        "seconds": {
            "start and generate": round(generated - started, 1),
            "save and reload check": round(time.monotonic() - generated, 1),
        },
    }
    wrong = 1 if tp > 1 else 2
    try:
        LLM(sharded, load_format="sharded_state", tensor_parallel_size=wrong, max_model_len=128)
    except ShardError as exc:
        result["mismatch_refused"] = str(exc)
        result["mismatch_problems"] = [p.render() for p in exc.problems]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
