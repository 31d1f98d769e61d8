"""The manifest's sha256 is recorded in the atomically switched pointer and checked by every
reader: a hand-edited manifest is refused (naming the file and the fix), and ``kvenv apply``
then builds a fresh generation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kvenv.env.activation import activate_in_process
from kvenv.env.root import current_manifest, current_manifest_path, current_state, read_pointer
from kvenv.errors import IntegrityError
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    Project,
    apply,
    fake_host_site,
    host_snapshot,
    locations,
    standard_project,
)
from tests.support.hardening import run_cli


def _applied(tmp_path: Path) -> tuple[Project, Locations, Path]:
    project = standard_project(tmp_path / "proj")
    where = locations(tmp_path)
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    assert result.manifest is not None
    return project, where, Path(result.manifest)


def _add_preload(manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["activation"]["env"]["LD_PRELOAD"] = "/tmp/evil.so"
    data["activation"]["ld_library_path"].append("/tmp/evil")
    manifest.write_text(json.dumps(data))


def test_pointer_records_the_manifest_digest(tmp_path: Path) -> None:
    _, where, manifest = _applied(tmp_path)
    pointer = read_pointer(where.root)
    assert pointer is not None
    assert pointer.manifest_sha256 == hashlib.sha256(manifest.read_bytes()).hexdigest()


def test_every_reader_refuses_an_edited_manifest(tmp_path: Path) -> None:
    _, where, manifest = _applied(tmp_path)
    _add_preload(manifest)
    for reader in (current_manifest, current_manifest_path):
        with pytest.raises(IntegrityError, match=r"manifest\.json") as info:
            reader(where.root)
        assert "kvenv apply" in (info.value.hint or "")
    with pytest.raises(IntegrityError):
        current_state(where)


def test_pointer_without_digest_is_unverifiable(tmp_path: Path) -> None:
    _, where, _ = _applied(tmp_path)
    pointer = where.root / "current.json"
    data = json.loads(pointer.read_text())
    data.pop("manifest_sha256")
    pointer.write_text(json.dumps(data))
    with pytest.raises(IntegrityError, match="no manifest digest"):
        current_manifest(where.root)


def test_cli_refuses_edited_manifest_then_apply_rebuilds(tmp_path: Path) -> None:
    project, where, manifest = _applied(tmp_path)
    _add_preload(manifest)
    common = [str(project.profile_path), "--root", str(where.root), "--cache", str(where.cache)]
    for command in ("activate", "verify", "status"):
        result = run_cli([command, *common])
        # verify is the check: a damaged state fails it (exit 1); the others refuse it (2)
        assert result.code == (1 if command == "verify" else 2), (command, result.text)
        assert str(manifest) in result.err and "kvenv apply" in result.err, result.err
        assert "LD_PRELOAD" not in result.out
    result = run_cli(["apply", *common])
    assert result.code == 0, result.text
    assert "already up to date" not in result.out
    assert run_cli(["verify", *common]).code == 0
    activated = run_cli(["activate", *common])
    assert activated.code == 0 and "LD_PRELOAD" not in activated.out


def test_in_process_activation_refuses_an_edited_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, where, manifest = _applied(tmp_path)
    _add_preload(manifest)
    monkeypatch.setenv("KVENV_ROOT", str(where.root))
    with pytest.raises(IntegrityError):
        activate_in_process(str(project.profile_path))


def test_an_explicit_current_manifest_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, manifest = _applied(tmp_path)
    _add_preload(manifest)
    result = run_cli(["activate", "--manifest", str(manifest)])
    assert result.code == 2 and str(manifest) in result.err, result.text
    monkeypatch.setenv("KVENV_MANIFEST", str(manifest))
    with pytest.raises(IntegrityError):
        activate_in_process()
