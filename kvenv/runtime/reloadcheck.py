"""The reload check: a saved ``sharded_state`` checkpoint reloaded in a fresh process must
generate what the engine that saved it generates.

A fixed probe prompt is run greedily (temperature 0, :data:`PROBE_TOKENS` tokens, the sampled
tokens' log-probabilities asked for) on the running engine, then in a new interpreter that
loads the checkpoint with ``load_format="sharded_state"`` at the same topology. The token ids
must be equal and every log-probability within :data:`LOGPROB_TOLERANCE`. On a mismatch the
worker extension (:mod:`kvenv.runtime.shardsave`) names the first saved tensor that differs
from what vLLM's loader produces from the source model.

The child (:mod:`kvenv.runtime.reloadchild`) runs in its own session (so a
timeout ends all of vLLM's processes), with this interpreter's ``sys.path``; it writes one JSON
result. A child that cannot start an engine for want of memory, or is killed, yields "not
reload-checked", never "valid". vllm is imported only in the child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from kvenv.runtime.shards import ShardInspection

PROBE_PROMPT = "kvenv reload check: the overlay keeps the host's torch and"
PROBE_TOKENS = 16
LOGPROB_TOLERANCE = 1e-3
RELOAD_TIMEOUT = 1800.0
_SYS_PATH_ENV = "KVENV_RELOADCHECK_SYS_PATH"
# the child's words when the engine could not start for want of memory (not the checkpoint's
# fault: the result is "not reload-checked")
_NO_MEMORY = (
    "out of memory",
    "cannot allocate memory",
    "memoryerror",
    "not enough memory",
    "insufficient memory",
    "no available memory for the cache blocks",
)


@attrs.frozen
class Probe:
    """What the probe prompt generated: token ids and their log-probabilities (None: the
    engine returned none)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": PROBE_PROMPT,
            "token_ids": list(self.token_ids),
            "logprobs": None if self.logprobs is None else list(self.logprobs),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Probe:
        logprobs = data.get("logprobs")
        return cls(
            tuple(int(t) for t in data["token_ids"]),
            None if logprobs is None else tuple(float(x) for x in logprobs),
        )


@attrs.frozen
class ReloadOutcome:
    """``status``: ``same`` (reloaded and generated the same), ``different`` (reloaded and
    generated something else, or failed to load: the checkpoint is wrong), ``not-checked``
    (the reload could not run: ``detail`` says why)."""

    status: Literal["same", "different", "not-checked"]
    detail: str
    expected: Probe | None = None
    found: Probe | None = None
    difference: Mapping[str, Any] | None = None  # the first differing tensor, if found


def probe(llm: Any) -> Probe:
    """Run the probe prompt greedily on ``llm`` (a ``vllm.LLM`` or kvenv's wrapper)."""
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=PROBE_TOKENS, ignore_eos=True, logprobs=0, seed=0
    )
    [output] = llm.generate([PROBE_PROMPT], params, use_tqdm=False)
    completion = output.outputs[0]
    ids = tuple(int(t) for t in completion.token_ids)
    logprobs: tuple[float, ...] | None = None
    if completion.logprobs:
        logprobs = tuple(
            float(step[token].logprob) for token, step in zip(ids, completion.logprobs, strict=True)
        )
    return Probe(ids, logprobs)


def compare(expected: Probe, found: Probe, tolerance: float = LOGPROB_TOLERANCE) -> str | None:
    """None when ``found`` is the same generation as ``expected``; else what differs."""
    if expected.token_ids != found.token_ids:
        pairs = zip(expected.token_ids, found.token_ids, strict=False)
        at = next(
            (i for i, (a, b) in enumerate(pairs) if a != b),
            min(len(expected.token_ids), len(found.token_ids)),
        )
        return (
            f"the reloaded checkpoint generates other tokens from token {at} on: "
            f"{list(found.token_ids)} instead of {list(expected.token_ids)}"
        )
    if expected.logprobs is not None and found.logprobs is not None:
        for i, (a, b) in enumerate(zip(expected.logprobs, found.logprobs, strict=True)):
            if abs(a - b) > tolerance:
                return (
                    f"the reloaded checkpoint generates the same tokens with other "
                    f"log-probabilities: token {i}: {b:.6f} instead of {a:.6f} (tolerance "
                    f"{tolerance})"
                )
    return None


def describe_difference(difference: Mapping[str, Any] | None) -> str:
    """One clause on the first differing tensor (or that none was found)."""
    if not difference:
        return "no saved tensor differs from what vLLM loads from the source model"
    where = f" in {difference['file']}" if difference.get("file") else ""
    return f"first differing tensor: {difference['tensor']}{where} ({difference['what']})"


def _no_memory(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _NO_MEMORY)


def run_reload(
    checkpoint: str | os.PathLike[str],
    *,
    engine: Mapping[str, Any],
    expected: Probe | None,
    source: str | None,
    profile: str | None,
    python: str | None = None,
    timeout: float = RELOAD_TIMEOUT,
) -> ReloadOutcome:
    """Reload ``checkpoint`` in a fresh interpreter (``python``, default this one, with this
    one's ``sys.path``) with ``engine`` keywords and ``load_format="sharded_state"``, run the
    probe and compare with ``expected`` (None: the child first runs the probe on ``source``
    loaded normally). ``source``: the model the checkpoint was saved from, to name the first
    differing tensor."""
    request = {
        "checkpoint": os.fspath(checkpoint),
        "engine": {k: v for k, v in engine.items() if _jsonable(v)},
        "expected": None if expected is None else expected.to_json(),
        "source": source,
        "profile": profile,
    }
    with tempfile.TemporaryDirectory(prefix="kvenv-reload-") as scratch:
        request_path = Path(scratch) / "request.json"
        result_path = Path(scratch) / "result.json"
        request_path.write_text(json.dumps(request), encoding="utf-8")
        env = dict(os.environ)
        if python is None or python == sys.executable:  # this interpreter: this sys.path
            env[_SYS_PATH_ENV] = json.dumps([p for p in sys.path if p])
        argv = [
            python or sys.executable,
            "-c",
            "import json, os, sys; sys.path[:0] = json.loads(os.environ.pop("
            f"{_SYS_PATH_ENV!r}, '[]')); import runpy; "
            "runpy.run_module('kvenv.runtime.reloadchild', run_name='__main__')",
            str(request_path),
            str(result_path),
        ]
        child = subprocess.Popen(
            argv, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            output, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return ReloadOutcome("not-checked", f"the reload did not finish in {timeout:.0f} s")
        finally:
            _kill_group(child)  # vLLM's engine processes, should any outlive the child
        text = output.decode("utf-8", "replace")
        if not result_path.exists():
            if child.returncode is not None and child.returncode < 0:
                name = signal.Signals(-child.returncode).name
                return ReloadOutcome(
                    "not-checked",
                    f"the reload process was killed ({name}; out of memory?): " + _tail(text),
                )
            return ReloadOutcome(
                "not-checked", f"the reload process failed (exit {child.returncode}): {_tail(text)}"
            )
        result = json.loads(result_path.read_text(encoding="utf-8"))
    return _outcome(result, expected)


def _outcome(result: Mapping[str, Any], expected: Probe | None) -> ReloadOutcome:
    if result.get("error"):
        error = str(result["error"])
        if result.get("phase") != "load" or _no_memory(error):
            return ReloadOutcome("not-checked", f"the reload could not run: {error}")
        return ReloadOutcome(
            "different",
            f"the checkpoint does not reload: {error}",
            difference=result.get("difference"),
        )
    found = Probe.from_json(result["found"])
    reference = expected or Probe.from_json(result["expected"])
    why = compare(reference, found)
    if why is None:
        return ReloadOutcome(
            "same",
            f"reloaded in a fresh process: the same {len(found.token_ids)} tokens"
            + ("" if found.logprobs is None else f", log-probabilities within {LOGPROB_TOLERANCE}"),
            expected=reference,
            found=found,
        )
    return ReloadOutcome(
        "different", why, expected=reference, found=found, difference=result.get("difference")
    )


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# --- a checkpoint on disk (kvenv inspect-shards --reload-check) ---------------------------------


@attrs.frozen
class CheckpointReload:
    """A reload check of a checkpoint on disk: the outcome, and the inspection it decides."""

    inspection: ShardInspection
    outcome: ReloadOutcome

    def to_json(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "status": outcome.status,
            "detail": outcome.detail,
            "expected": None if outcome.expected is None else outcome.expected.to_json(),
            "found": None if outcome.found is None else outcome.found.to_json(),
            "difference": None if outcome.difference is None else dict(outcome.difference),
        }


def check_checkpoint(
    inspection: ShardInspection,
    *,
    source: str | None = None,
    profile: str | None = None,
    python: str,
    timeout: float = RELOAD_TIMEOUT,
) -> CheckpointReload:
    """Reload the inspected checkpoint at its own topology in a fresh process of ``python``
    (the interpreter that runs vLLM) and compare the probe with the
    output recorded at save (``kvenv-shards.json``), else with ``source`` (default: the source
    model the manifest records, when it is a directory here) loaded normally. Returns the
    inspection with the verdict this decides."""
    manifest = inspection.manifest
    record = manifest.reload_check if manifest is not None else None
    expected = None
    if record is not None and record.status == "same" and record.token_ids is not None:
        expected = Probe(tuple(record.token_ids), _floats(record.logprobs))
    recorded = manifest.source_model if manifest is not None else None
    model = source or (recorded if recorded and os.path.isdir(recorded) else None)
    if expected is None and model is None:
        outcome = ReloadOutcome(
            "not-checked",
            "nothing to compare with: no output was recorded at save and no source model "
            "is here (pass --source DIR)",
        )
        return CheckpointReload(inspection, outcome)
    engine: dict[str, Any] = {"tensor_parallel_size": inspection.rank_count}
    if inspection.stage_count > 1:
        engine["pipeline_parallel_size"] = inspection.stage_count
    if manifest is not None and manifest.dtype:
        engine["dtype"] = manifest.dtype
    outcome = run_reload(
        inspection.path,
        engine=engine,
        expected=expected,
        source=os.path.abspath(model) if model else None,
        profile=profile,
        python=python,
        timeout=timeout,
    )
    if outcome.status == "same":
        decided: bool | str | None = True
    elif outcome.status == "different":
        decided = f"{outcome.detail}; {describe_difference(outcome.difference)}"
    else:
        decided = None
    return CheckpointReload(attrs.evolve(inspection, reloaded=decided), outcome)


def _floats(values: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)
