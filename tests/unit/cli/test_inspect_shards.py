"""`kvenv inspect-shards`: exit codes 0 valid, 1 invalid, 2 bad input; text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvenv.cli import main
from tests.fake_vllm.checkpoints import make_pp_checkpoint, make_tp_checkpoint


def test_without_a_manifest_completeness_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's own save (no kvenv-shards.json) may lack tensors: never called valid."""
    root = make_tp_checkpoint(tmp_path / "c", 2, parts=2)
    assert main(["inspect-shards", str(root), "--tensor-parallel-size", "2"]) == 0
    captured = capsys.readouterr()
    assert f"{root}: completeness unknown" in captured.out
    assert "topology: 2 tensor-parallel ranks\n" in captured.out
    assert "rank 1 part 1: model-rank-1-part-1.safetensors" in captured.out
    assert "completeness unknown: no kvenv-shards.json" in captured.out
    assert "warning: no kvenv-shards.json" in captured.err
    assert main(["inspect-shards", str(root), "--strict"]) == 1
    capsys.readouterr()
    assert main(["inspect-shards", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["verdict"], data["complete"], data["reload_checked"]) == (
        "completeness unknown",
        None,
        False,
    )


def test_messages_fit_the_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    assert main(["inspect-shards", str(root), "-tp", "2"]) == 1
    captured = capsys.readouterr()
    assert "topology: 1 tensor-parallel rank\n" in captured.out
    assert "checkpoint has 1 rank (saved with tensor_parallel_size=1)" in captured.err
    assert "or with vLLM's CPU build on at least 2 CPU cores" in captured.err
    shard = root / "model-rank-0-part-0.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])  # truncated in its header: not "empty"
    assert main(["inspect-shards", str(root)]) == 1
    captured = capsys.readouterr()
    assert "(100 B; unreadable: see the error below)" in captured.out
    assert "empty" not in captured.out


def test_topology_mismatch_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    assert main(["inspect-shards", str(root), "-tp", "1"]) == 1
    captured = capsys.readouterr()
    assert "INVALID" in captured.out
    assert "topology error: checkpoint has 2 ranks" in captured.err


def test_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_pp_checkpoint(tmp_path / "pp", tp=2, pp=2)
    assert main(["inspect-shards", str(root), "--json", "-pp", "3", "--verify"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False
    assert (data["rank_count"], data["stage_count"]) == (2, 2)
    assert "pipeline_parallel_size=3" in data["topology_errors"][0]
    assert len(data["shards"]) == 4


def test_damaged_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    (root / "model-rank-0-part-0.safetensors").write_bytes(b"\x05\x00")
    assert main(["inspect-shards", str(root)]) == 1
    assert "model-rank-0-part-0.safetensors: $: file is 2 bytes" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["missing", "file", "empty", "link", "bad-tp"])
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    target = {
        "missing": tmp_path / "nope",
        "file": root / "config.json",
        "empty": tmp_path / "e",
        "link": tmp_path / "l",
        "bad-tp": root,
    }[case]
    if case == "empty":
        target.mkdir()
    if case == "link":
        target.symlink_to(root)
    extra = ["-tp", "0"] if case == "bad-tp" else []
    assert main(["inspect-shards", str(target), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvenv: error: ")
    assert "Traceback" not in err


def test_commands_are_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "inspect-shards" in out and "serve" in out


def test_verify_says_what_it_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After hashing, the manifest line never says only "sizes checked"."""
    from kvenv.runtime.shards import build_shard_manifest, write_shard_manifest

    root = make_tp_checkpoint(tmp_path / "c", 1)
    manifest = build_shard_manifest(
        root,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        pattern="model-rank-{rank}-part-{part}.safetensors",
        vllm_version="0.32.0",
        dtype="float16",
        quantization=None,
        source_model=None,
        required_tensors=None,
    )
    write_shard_manifest(root, manifest)
    assert main(["inspect-shards", str(root)]) == 0
    assert "(sizes checked)" in capsys.readouterr().out
    assert main(["inspect-shards", str(root), "--verify"]) == 0
    assert "(sizes and sha256 verified)" in capsys.readouterr().out
    shard = root / "model-rank-0-part-0.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    assert main(["inspect-shards", str(root), "--verify"]) == 1
    captured = capsys.readouterr()
    assert "(sizes and sha256 checked: mismatch, see the errors below)" in captured.out
    assert "sizes checked)" not in captured.out
    assert "sha256 mismatch for model-rank-0-part-0.safetensors" in captured.err
