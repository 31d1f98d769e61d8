"""How long ``kvenv fingerprint`` takes on an environment with 200+ distributions, and what
pip and uv take to merely list the same distributions.

    python benchmarks/fingerprint.py [--dists 240] [--rounds 9] [--output PATH]

A throw-away venv (no pip) gets ``--dists`` small real wheels installed with PyPA ``installer``
(each with a few Requires-Dist lines and a module), plus a stand-in ``torch`` wheel carrying a
real-shaped ``torch/version.py`` (torch must never be imported: the run checks it was not).
Measured, median of ``--rounds`` interleaved rounds:

- ``take_snapshot`` in-process, over the venv's site-packages (the probe itself);
- ``kvenv fingerprint --json --python <venv python>`` as a command (interpreter start, CLI
  import, the isolated child probe of the other interpreter, JSON out);
- ``pip list --format json --path <site>`` and ``uv pip list --format json --python <venv>``:
  the nearest thing each tool offers, which lists names and versions only.

The aim: the fingerprint of 200+ distributions in under 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# This directory must not be on the path: a benchmark named like a stdlib module would shadow it.
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

from kvenv.env.wheelinstall import install_wheel  # noqa: E402
from kvenv.probe.host import take_snapshot  # noqa: E402
from tests.support.wheels import build_wheel  # noqa: E402

AIM_S = 0.300
VERSION_PY = "__version__ = '2.10.0+cu128'\ncuda: 'Optional[str]' = '12.8'\nhip = None\n"


def build_env(root: Path, count: int) -> tuple[Path, Path]:
    """A venv at ``root/venv`` with ``count`` distributions plus torch; (python, site dir)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    wheels = root / "wheels"
    for index in range(count):
        name = f"bench-dist-{index:03d}"
        requires = [f"bench-dist-{(index * 7 + k) % count:03d}>={k}.0" for k in range(3)]
        requires.append('colorama; sys_platform == "win32"')
        install_wheel(build_wheel(wheels, name, f"1.{index}.0", requires=requires), site)
    torch_files = {
        "torch/__init__.py": "raise ImportError('never import me')\n",
        "torch/version.py": VERSION_PY,
    }
    install_wheel(build_wheel(wheels, "torch", "2.10.0+cu128", files=torch_files), site)
    return python, site


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dists", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "fingerprint.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvenv-bench-fp-") as tmp:
        python, site = build_env(Path(tmp), args.dists)
        kvenv = [sys.executable, "-m", "kvenv", "fingerprint", "--json", "--python", str(python)]
        contenders: dict[str, list[str] | None] = {
            "kvenv fingerprint --json --python (command)": kvenv,
            "pip list --format json --path (names+versions only)": [
                sys.executable,
                "-m",
                "pip",
                "list",
                "--format",
                "json",
                "--path",
                str(site),
                "--disable-pip-version-check",
            ],
        }
        uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
        contenders["uv pip list --format json (names+versions only)"] = (
            [uv, "pip", "list", "--format", "json", "--python", str(python), "--offline"]
            if Path(uv).exists()
            else None
        )
        snap = take_snapshot(sys_path=[str(site)])
        found = len(snap.distributions)
        assert snap.torch is not None and snap.torch.cuda == "12.8", snap.torch
        times: dict[str, list[float]] = {"take_snapshot (in-process probe)": []}
        times.update({name: [] for name, argv in contenders.items() if argv})
        for _ in range(args.rounds):
            start = time.perf_counter()
            take_snapshot(sys_path=[str(site)])
            times["take_snapshot (in-process probe)"].append(time.perf_counter() - start)
            for name, argv in contenders.items():
                if argv:
                    times[name].append(_time(argv))
        assert "torch" not in sys.modules, "the fingerprint imported torch"
        out = json.loads(subprocess.run(kvenv, capture_output=True, text=True, check=True).stdout)
        assert len(out["distributions"]) == found
    results = {
        name: {
            "median_ms": round(statistics.median(values) * 1000, 1),
            "best_ms": round(min(values) * 1000, 1),
        }
        for name, values in times.items()
    }
    report = {
        "benchmark": "fingerprint of an environment with many distributions, torch not imported",
        "distributions": found,
        "rounds": args.rounds,
        "aim_ms": AIM_S * 1000,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_1min_after": round(os.getloadavg()[0], 2),
        "results": results,
        "within_aim": {
            k: v["median_ms"] <= AIM_S * 1000
            for k, v in results.items()
            if k.startswith(("take_snapshot", "kvenv"))
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
