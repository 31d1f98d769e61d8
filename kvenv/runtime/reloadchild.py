"""The child process of the reload check (:mod:`kvenv.runtime.reloadcheck`): load a
``sharded_state`` checkpoint with kvenv's ``LLM``, run the probe, and, when it differs, ask the
workers for the first differing tensor. Run as ``python -m kvenv.runtime.reloadchild REQUEST
RESULT`` (two JSON files); the parent decides what the result means.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvenv.runtime.reloadcheck import Probe, compare, probe


def _child(request_path: str, result_path: str) -> int:
    import gc

    from kvenv.runtime.llm import LLM

    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    engine = dict(request["engine"])
    engine.pop("load_format", None)
    result: dict[str, Any] = {}
    try:
        if request["expected"] is None:
            reference = LLM(
                request["source"], profile=request["profile"], validate_gpus=False, **engine
            )
            result["expected"] = probe(reference).to_json()
            del reference
            gc.collect()
        else:
            result["expected"] = request["expected"]
        result["phase"] = "load"
        llm = LLM(
            request["checkpoint"],
            profile=request["profile"],
            validate_gpus=False,
            load_format="sharded_state",
            **engine,
        )
        result["phase"] = "probe"
        found = probe(llm)
        result["found"] = found.to_json()
        mismatch = compare(Probe.from_json(result["expected"]), found)
        if mismatch is not None and request["source"]:
            result["difference"] = _difference(llm, request)
    except Exception as exc:  # reported to the parent, which decides
        from kvenv.errors import KvenvError, ShardError

        result["error"] = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KvenvError) and not isinstance(exc, ShardError):
            result["phase"] = "setup"  # kvenv refused to start: not the checkpoint's doing
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


def _difference(llm: Any, request: Mapping[str, Any]) -> dict[str, Any] | None:
    from kvenv.runtime.shardsave import EXTENSION

    if llm.engine_kwargs.get("worker_extension_cls") != EXTENSION:
        return None
    from kvenv.runtime.shards import TP_ONLY_PATTERN

    answers: Sequence[dict[str, Any]] = llm.collective_rpc(
        "kvenv_first_difference", args=(request["checkpoint"], TP_ONLY_PATTERN, request["source"])
    )
    return next((a for a in answers if a), {})


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
