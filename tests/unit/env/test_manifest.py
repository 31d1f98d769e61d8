"""The manifest model: atomic writes, strict reads with $.paths, runtime-root containment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvenv.cli import schemas
from kvenv.env.manifest import (
    manifest_from_dict,
    manifest_to_dict,
    read_manifest,
    write_manifest,
)
from kvenv.errors import InputError
from tests.support.jsonschema_subset import validate


def _data(root: str = "/r") -> dict[str, Any]:
    gen = f"{root}/generations/20260101T000000-abcdef"
    return {
        "schema": 1,
        "kvenv_version": "0.1.0",
        "created_at": "2026-01-01T00:00:00+00:00",
        "root": root,
        "dirs": {
            "generation": "20260101T000000-abcdef",
            "native": f"{gen}/native",
            "overlay": f"{gen}/overlay",
            "bin": f"{gen}/bin",
        },
        "profile": {"name": "t", "digest": "sha256:00"},
        "lock_digest": None,
        "native": {"name": "vllm", "version": "0.18.1", "sha256": "a" * 64, "source": "hf:x/y"},
        "distributions": [
            {
                "name": "helper",
                "version": "2.0",
                "layer": "overlay",
                "dist_info": "helper-2.0.dist-info",
                "record_digest": "sha256:11",
                "wheel_sha256": "b" * 64,
            }
        ],
        "activation": {
            "pythonpath": [f"{gen}/overlay", f"{gen}/native"],
            "path": [f"{gen}/bin"],
            "ld_library_path": ["/usr/local/nvidia/lib64"],
            "env": {"VLLM_X": "1"},
        },
    }


def test_round_trip_and_schema(tmp_path: Path) -> None:
    manifest = manifest_from_dict(_data(), file="m.json")
    path = tmp_path / "manifest.json"
    write_manifest(path, manifest)
    assert read_manifest(path) == manifest
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp file left
    document = json.loads(json.dumps(manifest_to_dict(manifest)))
    assert validate(document, schemas.generate("manifest")) == []


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d["dirs"].update(overlay="/elsewhere/overlay"), "$.dirs.overlay"),
        (lambda d: d["activation"]["pythonpath"].append("/r/../etc"), "$.activation.pythonpath[2]"),
        (lambda d: d["activation"]["path"].insert(0, "/usr/bin"), "$.activation.path[0]"),
        (lambda d: d["dirs"].update(generation="../x"), "$.dirs.generation"),
        (lambda d: d["activation"]["ld_library_path"].append("rel/lib"), "ld_library_path[1]"),
    ],
)
def test_paths_outside_the_root_are_refused(edit: Any, where: str) -> None:
    data = _data()
    edit(data)
    with pytest.raises(InputError) as caught:
        manifest_from_dict(data, file="m.json")
    assert any(p.path and p.path.endswith(where) for p in caught.value.problems)


def test_unknown_keys_and_bad_types_are_reported_with_paths() -> None:
    data = _data()
    data["surprise"] = 1
    data["distributions"][0]["wheel_sha256"] = "nothex"
    with pytest.raises(InputError) as caught:
        manifest_from_dict(data, file="m.json")
    paths = {p.path for p in caught.value.problems}
    assert "$.distributions[0].wheel_sha256" in paths


def test_wrong_root_and_unreadable(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        manifest_from_dict(_data(), file="m.json", root=Path("/other"))
    assert "belongs to the runtime root /r, not /other" in caught.value.render()
    with pytest.raises(InputError, match="not found"):
        read_manifest(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[1,")
    with pytest.raises(InputError, match="not valid JSON"):
        read_manifest(bad)
