"""docs/notebooks/kaggle-quickstart.ipynb, executed unchanged by a real Jupyter kernel (nbclient +
ipykernel) against a ``demo`` profile, every cell's output checked.

The kernel runs inside a network namespace (``unshare -rn``; its sockets to nbclient are Unix
sockets, ``transport="ipc"``), so nothing in the notebook can reach the network: the online
install takes the demo's wheels from the project (a path native and the lock's wheelhouse), the
offline part runs the single-file bundle (``kvenv bundle --single-file``) attached as Kaggle
attaches a dataset (``<input>/kvenv-bundle/kvenv-demo.pyz``, ``<input>`` a read-only bind mount
in the kernel's mount namespace) with the kernel's own python into a fresh root and cache, and
a fresh ``python -I -S`` (no site-packages, so no kvenv) activates through the file, imports
the overlay and holds no module of the file.
The ``demo`` project is tests/support/demo.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.demo import KVENV, clean_env, demo_project, netns_works
from tests.support.paths import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = REPO / "docs" / "notebooks" / "kaggle-quickstart.ipynb"


pytestmark = pytest.mark.skipif(
    not netns_works(), reason="needs `unshare -rn` (a user and network namespace)"
)


@pytest.fixture
def executed(tmp_path: Path) -> Iterator[tuple[Any, Path, Path]]:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    project = demo_project(tmp_path)
    work, inputs = tmp_path / "working", tmp_path / "input"
    work.mkdir()
    inputs.mkdir()
    kernels = tmp_path / "kernels"
    (kernels / "netns").mkdir(parents=True)
    # the connected machine's step: the single file, attached as a dataset (mounted read-only)
    made = subprocess.run(
        [
            KVENV,
            "bundle",
            "demo",
            "--single-file",
            str(inputs / "kvenv-bundle" / "kvenv-demo.pyz"),
            "--cache",
            str(tmp_path / "c"),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=clean_env(tmp_path),
    )
    assert made.returncode == 0, made.stderr
    # the kernel: no network (its own network namespace) and <input> a read-only mount
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    argv = ["unshare", "-rnm", "sh", "-c", mount, str(inputs), sys.executable, "-m"]
    argv += ["ipykernel_launcher", "-f", "{connection_file}"]
    (kernels / "netns" / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "netns", "language": "python"})
    )
    env = clean_env(tmp_path)
    env.update(KVENV_NB_PROFILE="demo", KVENV_NB_WORK=str(work), KVENV_NB_INPUT=str(inputs))
    manager = KernelManager(
        kernel_name="netns",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
        transport="ipc",
        ip=str(tmp_path / "kernel-ipc"),
    )
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        km=manager,
        timeout=120,
        resources={"metadata": {"path": str(project)}},
    )
    old = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)  # the kernel's environment is the launcher's
    try:
        client.execute(cwd=str(project))
    finally:
        os.environ.clear()
        os.environ.update(old)
    yield notebook, work, inputs


def _text(cell: Any) -> str:
    out = []
    for output in cell.get("outputs", []):
        assert output["output_type"] != "error", "".join(output.get("traceback", []))
        if output["output_type"] == "stream":
            out.append(output["text"])
        elif "data" in output:
            out.append(output["data"].get("text/plain", ""))
    return "".join(out).replace("\r\n", "\n")


def test_the_quickstart_notebook_runs_online_then_offline(
    executed: tuple[Any, Path, Path],
) -> None:
    notebook, work, inputs = executed
    code = [c for c in notebook.cells if c.cell_type == "code"]
    texts = [_text(c) for c in code]
    assert len(texts) == 11
    setup, install, plan, apply, imports, runtime, bundle, dataset, net, offline, check = texts
    assert setup == f"profile demo; runtime root {work / 'kvenv'}\n"
    assert install.startswith("kvenv ")
    assert "profile: demo" in plan and "compatible: yes" in plan
    assert "[todo] install-overlay: 1 wheel into the overlay dir" in plan
    assert "applied demo: generation " in apply and f"manifest: {work / 'kvenv'}" in apply
    assert imports == "markdown_it 3.0.0 from the runtime root\nmdurl 0.1.2 from the runtime root\n"
    assert runtime.startswith("runtime skipped: the demo profile has no model runtime")
    assert f"single-file bundle for demo written to {work / 'kvenv-demo.pyz'}" in bundle
    assert "2 wheel(s)" in bundle
    dataset_dir = inputs / "kvenv-bundle"
    first, listing = dataset.splitlines()
    assert first == f"{dataset_dir} read-only: True"
    assert listing == "['kvenv-demo.pyz']"
    assert net.splitlines() == [
        "network: unavailable",
        f"offline runtime root {work / 'kvenv-offline'}",
    ]
    assert "applied demo: generation " in offline
    assert f"manifest: {work / 'kvenv-offline'}/generations/" in offline
    assert check == (
        "offline runtime: True\nmodules from the file: []\ndataset still read-only: True\n"
    )
    manifests = list((work / "kvenv-offline").glob("generations/*/manifest.json"))
    assert len(manifests) == 1

    # the file the notebook made holds what the attached one holds
    def members(pyz: Path) -> list[tuple[str, int]]:  # the indexes record when they were made
        made_at = ("bundle/bundle.json", "bundle/SHA256SUMS", "kvenv-pyz.json")
        with zipfile.ZipFile(pyz) as archive:
            return [(i.filename, i.CRC) for i in archive.infolist() if i.filename not in made_at]

    attached = members(dataset_dir / "kvenv-demo.pyz")
    assert len([name for name, _ in attached if name.startswith("bundle/wheels/")]) == 2
    assert members(work / "kvenv-demo.pyz") == attached
