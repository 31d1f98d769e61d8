"""``kvenv.activate()`` in a live Jupyter kernel that has already imported a module the overlay
provides (issue 26): a real ipykernel driven through jupyter_client, each cell's output checked.

The kernel's environment has ``kvdemo-shadow`` 1.0 (installed by pip into a directory on its
``PYTHONPATH``); the applied ``demo`` profile's overlay has ``kvdemo-shadow`` 2.0, pulled in by
its native wheel ``kvdemo-native``. Imported before activation, the module gets a warning that
names it, the loaded version and path, the overlay's version and the fix; ``strict=True``
refuses and changes nothing; after a kernel restart, activating first gives the overlay's copy
and no warning, also when activating again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.wheels import build_wheel

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

KVENV = str(Path(sys.executable).parent / "kvenv")


def _env(base: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KVENV_", "PIP_", "UV_", "PYTHON")) and k != "VIRTUAL_ENV"
    }
    env["HOME"] = str(base / "home")
    env["XDG_CACHE_HOME"] = str(base / "home" / ".cache")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _applied(base: Path) -> tuple[Path, Path]:
    """The demo profile applied (overlay: kvdemo-shadow 2.0) and the kernel's site directory
    with kvdemo-shadow 1.0; (manifest, site directory)."""
    project, wheels = base / "project", base / "project" / "wheels"
    native = build_wheel(
        wheels,
        "kvdemo-native",
        "1.0",
        requires=["kvdemo-shadow==2.0"],
        files={"kvdemo_native/__init__.py": "__version__ = '1.0'\n"},
    )
    build_wheel(wheels, "kvdemo-shadow", "2.0")
    old = build_wheel(base / "old", "kvdemo-shadow", "1.0")
    (project / "profiles").mkdir(parents=True)
    (project / "profiles" / "demo.toml").write_text(
        "schema = 1\n"
        'name = "demo"\n'
        'description = "live-kernel test: an overlay module the kernel already has"\n'
        "[target]\n"
        'python = "3.10"\nimplementation = "cpython"\nabi = "none"\n'
        "[native]\n"
        'name = "kvdemo-native"\nversion = "1.0"\n'
        f'sha256 = "{hashlib.sha256(native.read_bytes()).hexdigest()}"\n'
        f"size = {native.stat().st_size}\n"
        "[native.source]\n"
        f'kind = "path"\npath = "wheels/{native.name}"\n'
        "[overlay]\n"
        'lock = "locks/pylock.demo.toml"\n'
    )
    env = _env(base)
    _run([KVENV, "lock", "demo", "--no-index", "--find-links", str(wheels)], project, env)
    root = base / "root"
    argv = [KVENV, "apply", "demo", "--root", str(root), "--cache", str(base / "cache")]
    _run([*argv, "--python", sys.executable], project, env)
    site = base / "kernel-site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    _run([*pip, "--target", str(site), str(old)], base, env)
    manifests = list(root.glob("generations/*/manifest.json"))
    assert len(manifests) == 1
    return manifests[0], site


class Kernel:
    """A real ipykernel (jupyter_client), its cells' stdout, stderr and error collected."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        kernels = base / "kernels"
        (kernels / "plain").mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        (kernels / "plain" / "kernel.json").write_text(
            json.dumps({"argv": argv, "display_name": "plain", "language": "python"})
        )
        self.manager = KernelManager(
            kernel_name="plain",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
            transport="ipc",
            ip=str(base / "kernel-ipc"),
        )
        self.manager.start_kernel(env=env, cwd=str(base))
        self._connect()

    def _connect(self) -> None:
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def restart(self) -> None:
        self.client.stop_channels()
        self.manager.restart_kernel(now=True)
        self._connect()

    def cell(self, code: str) -> tuple[str, str, str]:
        """Run ``code`` as a cell: (stdout, stderr, the error's name and value, or "")."""
        out: dict[str, list[str]] = {"stdout": [], "stderr": [], "error": []}

        def hook(message: dict[str, Any]) -> None:
            kind, content = message["header"]["msg_type"], message["content"]
            if kind == "stream":
                out[content["name"]].append(content["text"])
            elif kind == "error":
                out["error"].append(f"{content['ename']}: {content['evalue']}")

        self.client.execute_interactive(code, output_hook=hook, timeout=60)
        return tuple("".join(out[k]) for k in ("stdout", "stderr", "error"))  # type: ignore[return-value]

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel_and_manifest(tmp_path: Path) -> Iterator[tuple[Kernel, Path, Path]]:
    manifest, site = _applied(tmp_path)
    env = _env(tmp_path)
    env["PYTHONPATH"] = str(site)  # the kernel's environment: kvdemo-shadow 1.0
    kernel = Kernel(tmp_path, env)
    try:
        yield kernel, manifest, site
    finally:
        kernel.close()


def test_a_module_imported_before_activation_is_named_then_a_restart_cures_it(
    kernel_and_manifest: tuple[Kernel, Path, Path],
) -> None:
    kernel, manifest, site = kernel_and_manifest
    overlay = manifest.parent / "overlay"
    old_init = site / "kvdemo_shadow" / "__init__.py"

    out, err, error = kernel.cell(
        "import kvdemo_shadow\nprint(kvdemo_shadow.__version__, kvdemo_shadow.__file__)"
    )
    assert (out, err, error) == (f"1.0 {old_init}\n", "", "")

    # strict: refused, naming the module, both versions, where it came from and the fix
    out, err, error = kernel.cell(
        "import sys, kvenv\n"
        "from kvenv.errors import ConflictError\n"
        "before = list(sys.path)\n"
        "try:\n"
        f"    kvenv.activate(manifest={str(manifest)!r}, strict=True)\n"
        "except ConflictError as refused:\n"
        "    print(refused.render())\n"
        "print('sys.path unchanged:', sys.path == before)\n"
    )
    assert (err, error) == ("", "")
    assert (
        "module kvdemo_shadow (loaded 1.0, the overlay's kvdemo-shadow 2.0) is already imported"
        in out
    )
    assert f"module 'kvdemo_shadow' is already imported (1.0, from {old_init})" in out
    assert "the overlay provides kvdemo-shadow 2.0" in out
    assert "restart the kernel" in out and "kvenv.activate() before importing" in out
    assert out.endswith("sys.path unchanged: True\n")

    # not strict: activated, with a warning on the cell's stderr
    out, err, error = kernel.cell(
        f"print(kvenv.activate(manifest={str(manifest)!r}))\n"
        "import kvdemo_native, kvdemo_shadow\n"
        "print(kvdemo_native.__file__)\n"
        "print(kvdemo_shadow.__version__)\n"
    )
    assert error == ""
    assert out == f"True\n{manifest.parent / 'native' / 'kvdemo_native' / '__init__.py'}\n1.0\n"
    assert "AlreadyImportedWarning" in err
    assert f"module 'kvdemo_shadow' is already imported (1.0, from {old_init})" in err
    assert "the overlay provides kvdemo-shadow 2.0" in err
    assert "Fix: restart the kernel" in err

    # after a restart, activating first: the overlay's copy and no warning, twice
    kernel.restart()
    out, err, error = kernel.cell(
        "import warnings, kvenv\n"
        "from kvenv.errors import KvenvWarning\n"
        "warnings.simplefilter('always', KvenvWarning)\n"
        f"print(kvenv.activate(manifest={str(manifest)!r}))\n"
        "import kvdemo_shadow\n"
        "print(kvdemo_shadow.__version__, kvdemo_shadow.__file__)\n"
        f"print(kvenv.activate(manifest={str(manifest)!r}, strict=True))\n"
    )
    assert (err, error) == ("", "")
    assert out == f"True\n2.0 {overlay / 'kvdemo_shadow' / '__init__.py'}\nTrue\n"
