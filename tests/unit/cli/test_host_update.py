"""A host image update is a reviewed change (issue 36): after ``kvenv fingerprint --save`` of a
newer snapshot, ``kvenv lock --check`` fails and ``kvenv lock`` says which host packages the
lock relies on moved and what the overlay did about it (dropped, added, re-pinned), in the
same change format as any lock run.

Real host data: the two published ``pip freeze`` lists of Colab's GPU runtime (2026-05-08 and
2026-08-19, docs/hosts/), made snapshots with ``kvenv fingerprint --from-freeze`` as
docs/hosts.md says. The later image also moved to Python 3.13; the test holds the snapshot's
Python at the target's 3.12.13 so that what it sees is the packages moving."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support.clienv import isolated_cli_dir
from tests.support.hardening import run_cli
from tests.support.paths import REPO
from tests.support.wheels import build_wheel

FREEZES = REPO / "docs" / "hosts"
OLD = FREEZES / "colab-gpu.pip-freeze.2026-05-08.txt"
NEW = FREEZES / "colab-gpu.pip-freeze.2026-08-19.txt"
TAG = "cp312-cp312-manylinux_2_17_x86_64"


def fingerprint(freeze: Path, save: Path) -> None:
    flags = ["--python-version", "3.12.13", "--glibc", "2.35", "--save", str(save)]
    result = run_cli(["fingerprint", "--from-freeze", str(freeze), *flags])
    assert result.code == 0, result.text


def test_a_host_snapshot_bump_is_reported_as_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cli_dir(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wheels = tmp_path / "wheels"
    # the native wheel needs: torch (protected, the host's), numpy below 2.1 (the old host's
    # 2.0.2 fits, the new host's 2.1.3 does not), idna >= 3.15 (the old host's 3.13 does not
    # fit, the new host's 3.18 does), safetensors and transformers (the host's, both move)
    native = build_wheel(
        wheels,
        "nativepkg",
        "1.0.0",
        requires=["torch>=2.10", "numpy<2.1", "idna>=3.15", "safetensors", "transformers>=4"],
        tag=TAG,
    )
    build_wheel(wheels, "numpy", "2.0.2", tag=TAG)
    build_wheel(wheels, "idna", "3.19")
    snapshot = tmp_path / "profiles" / "colab.host.json"
    fingerprint(OLD, snapshot)
    (tmp_path / "profiles" / "colab.toml").write_text(
        'schema = 1\nname = "colab"\n'
        '[target]\npython = "3.12.13"\nabi = "cp312"\nglibc = "2.35"\n'
        '[host]\nsnapshot = "profiles/colab.host.json"\n'
        '[native]\nname = "nativepkg"\nversion = "1.0.0"\n'
        f'sha256 = "{hashlib.sha256(native.read_bytes()).hexdigest()}"\n'
        f'[native.source]\nkind = "path"\npath = "wheels/{native.name}"\n'
    )
    flags = ["--no-index", "--find-links", str(wheels)]
    first = run_cli(["lock", "colab", *flags])
    assert first.code == 0, first.text
    assert "Added idna v3.19" in first.out
    assert "Host numpy v2.0.2 relied on" in first.out
    assert run_cli(["lock", "colab", "--check"]).code == 0

    fingerprint(NEW, snapshot)  # the image moved on
    stale = run_cli(["lock", "colab", "--check"])
    assert stale.code == 1, stale.text
    dry = run_cli(["lock", "colab", "--dry-run", "--json", *flags])
    assert dry.code == 0, dry.text
    host = json.loads(dry.out)["changes"]["host"]
    assert host["snapshot-changed"]
    moved = {m["name"]: (m["old"], m["new"]) for m in host["moved"]}
    assert moved == {
        "safetensors": ("0.7.0", "0.8.0"),
        "torch": ("2.10.0+cu128", "2.11.0+cu128"),
        "transformers": ("5.0.0", "5.15.0"),
    }
    assert run_cli(["lock", "colab", "--check"]).code == 1  # the dry run wrote nothing

    relocked = run_cli(["lock", "colab", *flags])
    assert relocked.code == 0, relocked.text
    lines = relocked.out.splitlines()[2:]
    assert lines == [
        "Added numpy v2.0.2 (the lock relied on the host's v2.0.2; the host has v2.1.3 now)",
        "Removed idna v3.19 (the host's v3.18 is used now)",
        "Host safetensors v0.7.0 -> v0.8.0",
        "Host torch v2.10.0+cu128 -> v2.11.0+cu128",
        "Host transformers v5.0.0 -> v5.15.0",
        "Host idna v3.18 relied on",
        "Host numpy v2.0.2 no longer relied on",
    ], relocked.out
    assert run_cli(["lock", "colab", "--check"]).code == 0
    table = run_cli(["lock", "colab", "--format", "markdown", "--dry-run", *flags])
    assert "No changes." in table.out  # nothing left to change
