"""Opt-in (``-m network``): lock a real small requirement set from the real index for a cp312
manylinux x86_64 target while running on another Python, then install the produced pylock with
``uv pip install --target`` and ``pip install --target`` (both need a Python 3.12 interpreter
to install for, since a pylock's requires-python is checked against the installing one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from kvenv.cli import main
from tests.support.hermetic import real_home
from tests.support.lockenv import write_project

pytestmark = pytest.mark.network

BIN = Path(sys.executable).parent
REQUIRES = ["pyyaml>=6", 'six; python_version > "3.11"', "markupsafe", "requests"]


def _python312() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(str(p) for p in real_home().glob(".pyenv/versions/3.12*/bin/python3.12")),
    ]
    for candidate in candidates:
        if not candidate:
            continue
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip() == "(3, 12)":
            return candidate
    return None


def _env() -> dict[str, str]:
    scrub = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX")
    return {k: v for k, v in os.environ.items() if k not in scrub}


def _installed(target: Path) -> dict[str, str]:
    out = {}
    for info in target.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        out[name.lower().replace("_", "-")] = version
    return out


@pytest.fixture(scope="module")
def real_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("net") / "p"
    write_project(root, native_requires=REQUIRES, distributions=[])
    old = Path.cwd()
    saved = {k: os.environ.pop(k) for k in ("PIP_FIND_LINKS", "UV_FIND_LINKS") if k in os.environ}
    os.environ["KVENV_CACHE_DIR"] = str(root / "cache")
    try:
        os.chdir(root)
        assert main(["lock", "testbox", "--no-portable"]) == 0
        assert main(["lock", "testbox", "--check"]) == 0
    finally:
        os.chdir(old)
        os.environ.update(saved)
        os.environ.pop("KVENV_CACHE_DIR", None)
    return root / "locks" / "pylock.testbox.toml"


def test_the_real_lock_is_for_the_target(real_lock: Path) -> None:
    doc = tomllib.loads(real_lock.read_text())
    names = {p["name"]: p for p in doc["packages"]}
    assert {"pyyaml", "six", "markupsafe", "requests", "urllib3", "idna"} <= set(names)
    assert sys.version_info[:2] != (3, 12) or "six" in names
    for name in ("pyyaml", "markupsafe"):
        wheel = names[name]["wheels"][0]["name"]
        assert "-cp312-cp312-" in wheel and "manylinux" in wheel and "x86_64" in wheel
    for package in doc["packages"]:
        wheel = package["wheels"][0]
        assert len(wheel["hashes"]["sha256"]) == 64 and wheel["size"] > 0
        if package.get("tool", {}).get("kvenv", {}).get("native"):
            assert wheel["path"].startswith("../native/")  # the project's own file, by path
            continue
        assert wheel["url"].startswith("https://") and "upload-time" in wheel


def test_uv_installs_the_lock(real_lock: Path, tmp_path: Path) -> None:
    python = _python312()
    if python is None:
        pytest.skip("no Python 3.12 interpreter to install for")
    target = tmp_path / "uv-target"
    argv = [
        str(BIN / "uv"), "pip", "install", "--preview-features", "pylock", "--target",
        str(target), "--python", python, "--python-platform", "x86_64-manylinux_2_35",
        "-r", str(real_lock),
    ]  # fmt: skip
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    locked = {p["name"]: p["version"] for p in tomllib.loads(real_lock.read_text())["packages"]}
    assert _installed(target) == locked
    assert list((target / "yaml").glob("*.cpython-312-x86_64-linux-gnu.so")) or list(
        target.glob("_yaml/*.cpython-312-x86_64-linux-gnu.so")
    )


def test_pip_installs_the_lock(real_lock: Path, tmp_path: Path) -> None:
    python = _python312()
    if python is None:
        pytest.skip("no Python 3.12 interpreter to install for")
    target = tmp_path / "pip-target"
    argv = [
        str(BIN / "pip"), "--python", python, "install", "--no-cache-dir", "--target",
        str(target), "-r", str(real_lock),
    ]  # fmt: skip
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    locked = {p["name"]: p["version"] for p in tomllib.loads(real_lock.read_text())["packages"]}
    assert _installed(target) == locked
