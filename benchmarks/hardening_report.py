"""Run every hardening harness, the exhaustive ``slow`` variants included, and write the figures
to ``benchmarks/results/reliability.json`` (quoted by ``docs/reliability.md``).

Usage (from the repository root)::

    .venv/bin/python benchmarks/hardening_report.py

The slow harnesses record their own sections (faults: the kill campaign by kind, concurrency,
fuzz.*); this script adds the hostile-input, secrets, tampering-matrix and default-suite fault
sections from JUnit XML runs of those test files, and the total.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.hardening import FIGURES, record_figures  # noqa: E402

HOSTILE = [
    "tests/hardening/test_hostile_inputs.py",
    "tests/hardening/test_hostile_wheels.py",
    "tests/hardening/test_hostile_shards.py",
]
TAMPERING = ["tests/hardening/test_tampering.py"]
DEFAULT_FAULTS = ["tests/hardening/test_apply_faults.py", "tests/hardening/test_faults.py"]
FAST = "not network and not e2e and not slow"
SLOW = [
    "tests/hardening/test_faults.py",
    "tests/hardening/test_concurrency.py",
    "tests/hardening/test_fuzz_parsers.py",
]


def _junit(files: list[str], marker: str) -> tuple[dict[str, dict[str, int]], float]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        started = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                marker,
                f"--junitxml={report}",
                *files,
            ],
            cwd=ROOT,
            check=False,
        )
        elapsed = time.monotonic() - started
        tally: dict[str, dict[str, int]] = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "").rsplit(".", 1)[-1]
            counts = tally.setdefault(module, {"passed": 0, "failed": 0, "xfailed": 0})
            skipped = case.find("skipped")
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            elif skipped is not None and "xfail" in (
                skipped.get("type", "") + skipped.get("message", "")
            ):
                counts["xfailed"] += 1
            elif skipped is None:
                counts["passed"] += 1
    return tally, elapsed


def main() -> int:
    if FIGURES.exists():
        FIGURES.unlink()
    hostile, hostile_s = _junit(HOSTILE, "not network and not e2e")
    refused = sum(c["passed"] for c in hostile.values())
    total = sum(c["passed"] + c["failed"] + c["xfailed"] for c in hostile.values())
    record_figures(
        "hostile",
        {
            "refused": refused,
            "total": total,
            "known_open": sum(c["xfailed"] for c in hostile.values()),
            "by_module": hostile,
            "seconds": round(hostile_s, 1),
        },
    )
    secrets, _ = _junit(["tests/hardening/test_secrets.py"], "not network and not e2e")
    record_figures("secrets", {"tests": secrets, "leaks_found_by_passing_test": 0})
    tampering, tampering_s = _junit(TAMPERING, FAST)
    cases = tampering.get("test_tampering", {"passed": 0, "failed": 0, "xfailed": 0})
    record_figures(
        "tampering",
        {
            "cases": sum(cases.values()),
            "passed": cases["passed"],
            "failed": cases["failed"],
            "targets": ["generation", "store", "cache", "manifest", "pointer"],
            "operations": ["edit", "truncate", "delete", "chmod"],
            "seconds": round(tampering_s, 1),
        },
    )
    faults, faults_s = _junit(DEFAULT_FAULTS, FAST)
    record_figures("default_faults", {"by_module": faults, "seconds": round(faults_s, 1)})
    slow, slow_s = _junit(SLOW, "slow")
    record_figures("slow_harnesses", {"by_module": slow, "seconds": round(slow_s, 1)})
    runs = (hostile, secrets, tampering, faults, slow)
    failed = sum(c["failed"] for t in runs for c in t.values())
    print(FIGURES.read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
