"""``inspect_shards`` on a 6 GB, 4-file sharded checkpoint: headers only, so it should take
milliseconds whatever the size of the weights.

    python benchmarks/inspect_shards.py [--rounds N] [--tensors N] [--output PATH]

The checkpoint is TP 2 × 2 parts (``model-rank-R-part-P.safetensors``), 1.5 GB per file, each
with a valid header of ``--tensors`` tensors (default 220, about what a 3B model's rank file
holds) followed by a sparse hole, plus config/tokenizer files and a ``kvenv-shards.json``
(built once, which hashes the 6 GB of holes; at inspection sizes are checked, sha256 is not,
as ``--verify`` is off). Each round runs in this process
with warm page cache after one untimed warm-up; the median, min and max are reported, and the
bytes actually read (``rchar`` from ``/proc/self/io``) prove that the tensor data is never
touched. Writes JSON (default ``benchmarks/results/inspect.json``). The aim: under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# This directory must not be on the path: a benchmark named like a stdlib module would shadow it.
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

from kvenv.runtime.shards import (  # noqa: E402
    TP_ONLY_PATTERN,
    build_shard_manifest,
    inspect_shards,
    write_shard_manifest,
)
from tests.support.safetensors_files import write_sparse  # noqa: E402

AIM_MS = 50.0
FILE_BYTES = 1_500_000_000
TP, PARTS = 2, 2


def _tensors(count: int, total_bytes: int, part: int) -> dict[str, tuple[str, list[int]]]:
    """``count`` F16 tensors whose data adds up to ``total_bytes``; each part holds its own
    layers, as vLLM's split does."""
    per = total_bytes // count // 2  # F16 elements per tensor
    width = 2048
    rows = max(1, per // width)
    tensors = {
        f"model.layers.{part}.{i // 8}.block.{i % 8}.weight": ("F16", [rows, width])
        for i in range(count - 1)
    }
    used = (count - 1) * rows * width * 2
    tensors[f"lm_head.{part}.weight"] = ("F16", [max(0, (total_bytes - used) // 2 // width), width])
    return tensors


def build(root: Path, tensors: int) -> int:
    """Write the checkpoint; its manifest is the real one (this hashes 6 GB of holes once)."""
    total = 0
    for rank in range(TP):
        for part in range(PARTS):
            name = TP_ONLY_PATTERN.format(rank=rank, part=part)
            total += write_sparse(root / name, _tensors(tensors, FILE_BYTES, part))
    for name in ("config.json", "tokenizer_config.json", "generation_config.json"):
        (root / name).write_text("{}")
    manifest = build_shard_manifest(
        root,
        tensor_parallel_size=TP,
        pipeline_parallel_size=1,
        pattern=TP_ONLY_PATTERN,
        vllm_version=None,
        dtype="float16",
        quantization=None,
        source_model=None,
    )
    write_shard_manifest(root, manifest)
    return total


def _rchar() -> int | None:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--tensors", type=int, default=220)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "inspect.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kvenv-inspect-bench-") as tmp:
        root = Path(tmp)
        total = build(root, args.tensors)
        disk = sum(p.stat().st_blocks * 512 for p in root.iterdir())
        result = inspect_shards(root, tensor_parallel_size=TP)  # warm-up, untimed
        if not result.valid:
            problems = result.problems()
            raise SystemExit(
                f"benchmark checkpoint invalid ({len(problems)} problems): " + problems[0].render()
            )
        times: list[float] = []
        before = _rchar()
        for _ in range(args.rounds):
            start = time.perf_counter()
            inspect_shards(root, tensor_parallel_size=TP)
            times.append((time.perf_counter() - start) * 1000)
        after = _rchar()
    median = statistics.median(times)
    report = {
        "benchmark": "inspect_shards",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "checkpoint": {
            "files": TP * PARTS,
            "tensor_parallel_size": TP,
            "parts_per_rank": PARTS,
            "tensors_per_file": args.tensors,
            "total_bytes": total,
            "bytes_on_disk": disk,
        },
        "rounds": args.rounds,
        "ms": {
            "median": round(median, 3),
            "min": round(min(times), 3),
            "max": round(max(times), 3),
        },
        "bytes_read_per_round": (after - before) // args.rounds
        if before is not None and after is not None
        else None,
        "aim_ms": AIM_MS,
        "meets_aim": median < AIM_MS,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    read = report["bytes_read_per_round"]
    sys.stdout.write(
        f"inspect_shards on {total / 1e9:.1f} GB in {TP * PARTS} files "
        f"({args.tensors} tensors each): median {median:.2f} ms "
        f"(min {min(times):.2f}, max {max(times):.2f}; {args.rounds} rounds); "
        f"read {read} bytes per round; aim < {AIM_MS:g} ms: "
        f"{'met' if median < AIM_MS else 'MISSED'}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
