"""Recorded hosts under ``tests/fixtures/host/<scenario>/`` replayed as probe effects.

``scenario.json`` lists ``environ``, ``files`` (absolute path -> fixture file name, or ``=text``
for inline content), ``dirs``, ``commands`` (command line -> ``{"file"|"stdout", "returncode"}``)
and what the probes must find (``expect``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvenv.probe.effects import Effects, RunResult
from kvenv.probe.nvml import NvmlReading

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "host"
SCENARIOS = sorted(p.name for p in ROOT.iterdir() if (p / "scenario.json").is_file())


def scenario(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / name / "scenario.json").read_text())
    return data


def _content(name: str, spec: str) -> str:
    return spec[1:] if spec.startswith("=") else (ROOT / name / spec).read_text()


def command_output(name: str, spec: Mapping[str, Any]) -> RunResult:
    stdout = _content(name, spec["file"]) if "file" in spec else spec.get("stdout", "")
    return RunResult(int(spec.get("returncode", 0)), stdout, spec.get("stderr", ""))


def effects(
    name: str,
    *,
    environ: Mapping[str, str] | None = None,
    nvml: NvmlReading | None = None,
    libc: tuple[str, str] | None = ("glibc", "2.35"),
) -> Effects:
    """The recorded host ``name``; ``environ`` entries are added to (or replace) its own."""
    data = scenario(name)
    env = dict(data.get("environ", {}))
    env.update(environ or {})
    return Effects.recorded(
        files={path: _content(name, spec) for path, spec in data.get("files", {}).items()},
        dirs=data.get("dirs", []),
        commands={line: command_output(name, spec) for line, spec in data["commands"].items()},
        environ=env,
        nvml=nvml,
        libc=libc,
    )
