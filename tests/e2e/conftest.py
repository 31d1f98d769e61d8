"""The ``host`` fixture of the end-to-end proof (helpers and environment variables: see
:mod:`tests.e2e.hostenv`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.hostenv import (
    REPO,
    TORCH_VERSION,
    Host,
    Timer,
    base_python,
    cache_dir,
    clean_env,
    ensure_wheelhouse,
    run,
    site_packages,
    uv_binary,
)


def _work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    explicit = os.environ.get("KVENV_E2E_WORKDIR")
    if not explicit:
        return tmp_path_factory.mktemp("e2e")
    base = Path(explicit).expanduser()
    base.mkdir(parents=True, exist_ok=True)
    work = base / time.strftime("run-%Y%m%dT%H%M%S")
    work.mkdir()
    return work


@pytest.fixture(scope="session")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    work = _work_dir(tmp_path_factory)
    timer = Timer(work / "times.json")
    start = time.perf_counter()
    wheels = ensure_wheelhouse(cache)
    timer.add("0 wheelhouse", time.perf_counter() - start)

    uv = uv_binary()
    uv_env = clean_env(UV_CACHE_DIR=str(cache / "uv"))
    dist = work / "dist"
    source = Path(os.environ.get("KVENV_E2E_SOURCE") or REPO)
    run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
        env=clean_env(),
        cwd=source,
        timer=timer,
        step="0 build kvenv wheel",
    )
    (kvenv_wheel,) = dist.glob("kvenv_overlay-*.whl")
    venv = work / "host"
    run(
        [uv, "venv", "--python", base_python(), str(venv)],
        env=uv_env,
        timer=timer,
        step="0 host venv",
    )
    py = str(venv / "bin" / "python")
    # The preinstalled framework: the CPU torch and its own dependencies, from disk only.
    from_disk = ["--no-index", "--find-links", str(wheels)]
    run(
        [
            uv,
            "pip",
            "install",
            "--python",
            py,
            "--compile-bytecode",
            *from_disk,
            f"torch=={TORCH_VERSION}",
        ],
        env=uv_env,
        timer=timer,
        step="0 host torch",
    )
    # kvenv, as a user installs it into the host.
    run(
        [uv, "pip", "install", "--python", py, "--compile-bytecode", str(kvenv_wheel)],
        env=uv_env,
        timer=timer,
        step="0 host kvenv",
    )
    project = work / "project"
    (project / "profiles").mkdir(parents=True)
    env = clean_env(
        KVENV_ROOT=str(work / "root"),
        KVENV_CACHE_DIR=str(cache / "kvenv"),
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
    )
    yield Host(
        work=work,
        cache=cache,
        wheels=wheels,
        venv=venv,
        site=site_packages(venv),
        project=project,
        root=work / "root",
        kvenv_cache=cache / "kvenv",
        timer=timer,
        env=env,
        find_links_only=os.environ.get("KVENV_E2E_FIND_LINKS") == "1",
    )
    print(f"\ne2e step times (s), also in {timer.path}:")
    for name, seconds in timer.seconds.items():
        print(f"  {name:<40} {seconds:8.2f}")
