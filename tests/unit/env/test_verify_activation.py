"""``verify`` recomputes what activation would emit from the profile and the generation and
compares it with the manifest's activation: an added ``ld_library_path`` entry, an
``env.LD_PRELOAD`` or an extra ``PYTHONPATH`` entry is drift (exit 1), even when whoever edited
the manifest also re-sealed the pointer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvenv.env.root import current_state
from kvenv.env.verify import verify_activation
from tests.support.applyenv import apply, fake_host_site, host_snapshot, locations, standard_project
from tests.support.hardening import run_cli

Edit = Callable[[dict[str, Any], Path], None]


def _env(data: dict[str, Any], _root: Path) -> None:
    data["activation"]["env"]["LD_PRELOAD"] = "/tmp/evil.so"


def _lib(data: dict[str, Any], _root: Path) -> None:
    data["activation"]["ld_library_path"].append("/tmp/evil-libs")


def _pythonpath(data: dict[str, Any], root: Path) -> None:
    extra = root / "generations" / data["dirs"]["generation"] / "bin"
    data["activation"]["pythonpath"].append(str(extra))


def _value(data: dict[str, Any], _root: Path) -> None:
    data["activation"]["env"]["DEMO_VAR"] = "changed"


def _pth(data: dict[str, Any], _root: Path) -> None:
    data["activation"]["pth_imports"].append("import os; os.system('id')")


CASES: dict[str, tuple[Edit, str]] = {
    "env-LD_PRELOAD": (_env, "LD_PRELOAD"),
    "ld_library_path": (_lib, "/tmp/evil-libs"),
    "pythonpath": (_pythonpath, "pythonpath"),
    "env-value": (_value, "DEMO_VAR"),
    "pth-import": (_pth, "pth_imports"),
}


def _reseal(root: Path, manifest: Path, edit: Edit) -> None:
    data = json.loads(manifest.read_text())
    edit(data, root)
    manifest.write_text(json.dumps(data))
    pointer = json.loads((root / "current.json").read_text())
    pointer["manifest_sha256"] = hashlib.sha256(manifest.read_bytes()).hexdigest()
    (root / "current.json").write_text(json.dumps(pointer))


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_reports_an_activation_the_profile_does_not_make(tmp_path: Path, case: str) -> None:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    common = [str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    assert run_cli(["apply", *common]).code == 0
    assert run_cli(["verify", *common]).code == 0
    pointer = json.loads((where.root / "current.json").read_text())
    manifest = where.root / "generations" / pointer["generation"] / "manifest.json"
    edit, named = CASES[case]
    _reseal(where.root, manifest, edit)
    result = run_cli(["verify", *common, "--json"])
    assert result.code == 1, result.text
    data = json.loads(result.out)
    assert data["ok"] is False
    assert any(d["kind"] == "activation" and named in d["message"] for d in data["drift"]), data
    plain = run_cli(["verify", *common])
    assert plain.code == 1 and named in plain.err, plain.err


def test_an_untouched_generation_has_no_activation_drift(tmp_path: Path) -> None:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    host = host_snapshot(fake_host_site(tmp_path))
    apply(project.loaded(), project.lock(), host, where)
    manifest = current_state(where)[1]
    assert manifest is not None
    assert verify_activation(manifest, project.loaded(), host) == []
    assert verify_activation(manifest, project.loaded(), None) == []
