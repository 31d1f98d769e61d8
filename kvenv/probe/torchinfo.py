"""PyTorch on the host, read without importing it: the ``torch`` distribution's metadata and
``torch/version.py`` (``__version__`` and ``cuda``, parsed, never executed).

What only an import can tell (is CUDA usable, how many devices, which NCCL) is asked of a
separate ``python -I`` process on request (``--import-torch``): importing torch takes seconds
and initialises CUDA, which kvenv's own process must never do behind the user's back.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from pathlib import Path

import attrs

from kvenv._util import jsonio
from kvenv.model.snapshot import Distribution, TorchInfo
from kvenv.probe.effects import Effects

IMPORT_TIMEOUT = 180.0
_CU_LABEL = re.compile(r"cu(\d+)(\d)$")

# Runs in the probed interpreter: sys.argv[1] is the JSON import path to use.
IMPORT_PROBE = r"""
import json, os, sys
sys.path[:] = json.loads(sys.argv[1])
out = {}
try:
    import torch
except Exception as exc:
    out["error"] = "import torch failed: %s: %s" % (type(exc).__name__, exc)
else:
    out["version"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    out["location"] = os.path.dirname(torch.__file__)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count())
    except Exception as exc:
        out["error"] = "torch.cuda failed: %s" % exc
    try:
        v = torch.cuda.nccl.version()
        if isinstance(v, int) and v >= 10000:
            v = (v // 10000, v // 100 % 100, v % 100)
        elif isinstance(v, int):
            v = (v // 1000, v // 100 % 10, v % 100)
        out["nccl"] = ".".join(str(p) for p in v)
    except Exception as exc:
        out["nccl_error"] = str(exc)
sys.stdout.write(json.dumps(out) + "\n")
"""


def parse_version_file(text: str) -> dict[str, str | None]:
    """The literal string assignments of ``torch/version.py`` (``cuda = None`` on CPU builds)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or not isinstance(value, ast.Constant):
            continue
        if value.value is None or isinstance(value.value, str):
            found[target.id] = value.value
    return found


def cuda_from_label(version: str) -> str | None:
    """``2.10.0+cu128`` -> ``12.8`` (the wheel's local label, when version.py is missing)."""
    _, _, label = version.partition("+")
    match = _CU_LABEL.fullmatch(label)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def torch_from_metadata(dist: Distribution) -> tuple[TorchInfo, list[str]]:
    """Torch as its distribution and ``version.py`` describe it (read from the import path,
    like the distributions themselves)."""
    notes: list[str] = []
    package = f"{dist.location}/torch" if dist.location else None
    text = _read(f"{package}/version.py") if package else None
    fields = parse_version_file(text) if text else {}
    version = fields.get("__version__") or dist.version
    if "cuda" in fields:
        cuda = fields["cuda"]
    else:
        cuda = cuda_from_label(version) if version else None
        notes.append(f"torch/version.py not readable under {dist.location}; CUDA from its version")
    return TorchInfo(version=version, cuda=cuda, location=package), notes


def import_torch(
    info: TorchInfo | None, python: str, sys_path: Sequence[str], effects: Effects
) -> tuple[TorchInfo | None, list[str]]:
    """``info`` completed by importing torch in ``python`` (a child process)."""
    argv = [python, "-I", "-c", IMPORT_PROBE, json.dumps(list(sys_path))]
    result = effects.run(argv, IMPORT_TIMEOUT)
    if result is None:
        return info, [f"--import-torch: could not run {python} (missing or timed out)"]
    lines = result.stdout.strip().splitlines()
    try:
        data = jsonio.loads_json(lines[-1], file=python) if lines else None
    except ValueError:  # malformed, or nested too deeply
        data = None
    if not isinstance(data, dict):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return info, [f"--import-torch: the probe failed (exit {result.returncode}): {last}"]
    notes = [str(data[k]) for k in ("error", "nccl_error") if data.get(k)]
    if "version" not in data:
        return info, notes
    base = info or TorchInfo()
    merged = attrs.evolve(
        base,
        version=_str(data.get("version")) or base.version,
        cuda=_str(data.get("cuda")) if "cuda" in data else base.cuda,
        location=base.location or _str(data.get("location")),
        cuda_available=_bool(data.get("cuda_available")),
        device_count=_int(data.get("device_count")),
        nccl=_str(data.get("nccl")),
    )
    return merged, notes


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
