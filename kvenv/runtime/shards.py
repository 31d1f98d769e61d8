"""Inspecting vLLM ``sharded_state`` checkpoints from their safetensors headers alone.

vLLM writes one set of files per tensor-parallel rank (and, from 0.32, per pipeline stage):
``model-rank-R-part-P.safetensors`` or ``model-pp-S-tp-R-part-P.safetensors``. Loading does not
check that the number of ranks matches ``tensor_parallel_size``: with a smaller TP the weights
are silently narrowed. :func:`inspect_shards` reads every header (never the tensor data, never
torch), checks the layout, the metadata files, kvenv's own ``kvenv-shards.json`` manifest and,
when asked, the expected topology.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from kvenv import __version__
from kvenv._util import atomic, hashing, jsonio
from kvenv.errors import InputError, Problem, ShardError
from kvenv.model import convert, formats
from kvenv.model.fields import NonEmpty, PositiveInt, RelPath, Sha256
from kvenv.runtime.safetensors_header import Header, HeaderError, read_header

TP_ONLY_PATTERN = "model-rank-{rank}-part-{part}.safetensors"
PP_AND_TP_PATTERN = "model-pp-{pp_rank}-tp-{tp_rank}-part-{part}.safetensors"
SHARD_MANIFEST_NAME = "kvenv-shards.json"
HF_INDEX_NAME = "model.safetensors.index.json"
_INCOMPLETE_FIX = (
    "save it again with kvenv's LLM.save_sharded_model, which saves the weights vLLM's CPU "
    "build processes away as vLLM's own loader produces them, and reload-checks the result"
)
_RELOAD_FIX = "save it again from the source model with kvenv's LLM.save_sharded_model"
REQUIRED_METADATA: tuple[str, ...] = ("config.json", "tokenizer_config.json")
WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth")

_TP_RE = re.compile(r"model-rank-([0-9]+)-part-([0-9]+)\.safetensors")
_PP_RE = re.compile(r"model-pp-([0-9]+)-tp-([0-9]+)-part-([0-9]+)\.safetensors")

Pattern = Literal["tp", "pp-tp"]
SHARD_PATTERNS: Mapping[str, str] = {"tp": TP_ONLY_PATTERN, "pp-tp": PP_AND_TP_PATTERN}


# --- kvenv-shards.json -------------------------------------------------------------------------


@attrs.frozen
class ManifestFile:
    path: RelPath
    size: int
    sha256: Sha256


@attrs.frozen
class ReloadRecord:
    """The reload check of a save (:mod:`kvenv.runtime.reloadcheck`): ``same`` (reloaded in a
    fresh process, the probe generated the same tokens) or ``not-checked`` (``detail``: why)."""

    status: Literal["same", "not-checked"]
    detail: str
    vllm_version: str | None = None
    prompt: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@attrs.frozen
class ShardManifest:
    """``kvenv-shards.json``: how a checkpoint was saved, and every file with size and sha256."""

    schema: Literal[1]
    kind: Literal["kvenv-shards"]
    tensor_parallel_size: PositiveInt
    pipeline_parallel_size: PositiveInt
    pattern: NonEmpty
    files: list[ManifestFile]
    vllm_version: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    source_model: str | None = None
    # the tensors the model needs (as vLLM's workers reported them at save time); a shard set
    # without one of them is incomplete and would fail to load ("Missing keys")
    required_tensors: list[str] | None = None
    kvenv_version: str | None = None  # the kvenv that saved it (since 0.2)
    # how the save was proven: reloaded with the same output, or why not
    reload_check: ReloadRecord | None = None


def manifest_to_json(manifest: ShardManifest) -> dict[str, Any]:
    data: dict[str, Any] = convert.unstructure(manifest)
    if data.get("required_tensors") is None:
        data.pop("required_tensors", None)  # manifests saved without the list stay as they were
    if data.get("reload_check") is None:
        data.pop("reload_check", None)
    return data


# --- the inspection ----------------------------------------------------------------------------


@attrs.frozen
class Shard:
    name: str
    stage: int
    rank: int
    part: int
    size: int
    header_size: int | None = None
    tensor_count: int | None = None
    tensor_bytes: int | None = None
    dtypes: dict[str, int] = attrs.field(factory=dict)
    sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "rank": self.rank,
            "part": self.part,
            "size": self.size,
            "header_size": self.header_size,
            "tensors": self.tensor_count,
            "tensor_bytes": self.tensor_bytes,
            "dtypes": self.dtypes,
            "sha256": self.sha256,
        }


@attrs.frozen
class ShardInspection:
    """What :func:`inspect_shards` found. ``valid`` is the verdict; ``errors`` say why not."""

    path: str
    pattern: Pattern | None
    rank_count: int
    stage_count: int
    total_size: int
    tensor_count: int
    shards: tuple[Shard, ...]
    metadata_files: tuple[str, ...]
    missing_metadata: tuple[str, ...]
    other_weight_files: tuple[str, ...]
    manifest: ShardManifest | None
    verified: bool
    errors: tuple[Problem, ...]
    topology_errors: tuple[str, ...]
    warnings: tuple[str, ...]
    # tensors the manifest's required_tensors names that no shard holds
    missing_tensors: tuple[str, ...] = ()
    verify_requested: bool = False  # sha256 were checked (``verify``), whatever the outcome
    # a reload check run on this inspection (kvenv.runtime.reloadcheck.check_checkpoint):
    # True: reloaded to the same output; a text: why it does not reload to the same output
    reloaded: bool | str | None = None

    @property
    def valid(self) -> bool:
        """No problem found in the files (layout, headers, manifest, metadata, topology and,
        where recorded, completeness). Not a promise that it loads: see :attr:`verdict`."""
        return (
            bool(self.shards)
            and not self.errors
            and not self.missing_metadata
            and not self.topology_errors
            and not self.missing_tensors
            and not isinstance(self.reloaded, str)
        )

    @property
    def complete(self) -> bool | None:
        """True: every tensor the model needs is in a shard; None: unknown (no
        ``kvenv-shards.json``, or one without ``required_tensors``)."""
        if self.reloaded is True:
            return True  # vLLM's sharded_state load fails on a missing tensor
        if self.manifest is None or self.manifest.required_tensors is None:
            return None
        return not self.missing_tensors

    @property
    def reload_checked(self) -> bool:
        """The save was reloaded in a fresh process and generated the same tokens."""
        if self.reloaded is not None:
            return self.reloaded is True
        record = self.manifest.reload_check if self.manifest is not None else None
        return record is not None and record.status == "same"

    @property
    def verdict(self) -> Literal["valid", "INVALID", "completeness unknown", "not reload-checked"]:
        """``valid`` only for a checkpoint without problems, known complete, and reloaded to the
        same output; otherwise what is wrong or unknown."""
        if not self.valid:
            return "INVALID"
        if self.complete is None:
            return "completeness unknown"
        if not self.reload_checked:
            return "not reload-checked"
        return "valid"

    @property
    def tensor_parallel_size(self) -> int:
        return self.rank_count

    @property
    def pipeline_parallel_size(self) -> int:
        return self.stage_count

    def problems(self) -> list[Problem]:
        """Everything that makes the checkpoint invalid, as problems (for a raised error)."""
        found = list(self.errors)
        found += [Problem(t, file=self.path) for t in self.topology_errors]
        found += [
            Problem(
                f"required metadata file {m} is missing",
                file=self.path,
                fix=f"copy {m} from the source model",
            )
            for m in self.missing_metadata
        ]
        if self.missing_tensors:
            found.append(Problem(self.missing_text(), file=self.path, fix=_INCOMPLETE_FIX))
        if not self.shards:
            found.append(Problem("no shard files", file=self.path))
        if isinstance(self.reloaded, str):
            found.append(Problem(self.reloaded, file=self.path, fix=_RELOAD_FIX))
        return found

    def missing_text(self) -> str:
        """One sentence on the tensors the model needs that no shard holds."""
        missing = self.missing_tensors
        required = len(self.manifest.required_tensors or ()) if self.manifest else 0
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        return (
            f"incomplete: {len(missing)} of the {required} tensors the model needs are in no "
            f"shard ({shown}); vLLM would fail to load it"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "path": self.path,
            "valid": self.valid,
            "verdict": self.verdict,
            "complete": self.complete,
            "reload_checked": self.reload_checked,
            "pattern": SHARD_PATTERNS[self.pattern] if self.pattern else None,
            "rank_count": self.rank_count,
            "stage_count": self.stage_count,
            "tensor_parallel_size": self.rank_count,
            "pipeline_parallel_size": self.stage_count,
            "total_size": self.total_size,
            "tensor_count": self.tensor_count,
            "shards": [s.to_json() for s in self.shards],
            "metadata_files": list(self.metadata_files),
            "missing_metadata": list(self.missing_metadata),
            "other_weight_files": list(self.other_weight_files),
            "manifest": manifest_to_json(self.manifest) if self.manifest else None,
            "verified": self.verified,
            "errors": [p.to_json() for p in self.errors],
            "topology_errors": list(self.topology_errors),
            "missing_tensors": list(self.missing_tensors),
            "warnings": list(self.warnings),
        }


def inspect_shards(
    path: str | os.PathLike[str],
    *,
    tensor_parallel_size: int | None = None,
    pipeline_parallel_size: int | None = None,
    verify: bool = False,
) -> ShardInspection:
    """Inspect the sharded checkpoint directory ``path`` from its headers.

    Raises :class:`ShardError` when ``path`` cannot be inspected at all (missing, not a
    directory, a link, or no shard files). A checkpoint that can be read but is wrong comes back
    with ``valid`` false and the reasons in ``errors``, ``topology_errors`` and
    ``missing_metadata``. ``verify`` also checks every sha256 recorded in ``kvenv-shards.json``.
    """
    for name, value in (
        ("tensor_parallel_size", tensor_parallel_size),
        ("pipeline_parallel_size", pipeline_parallel_size),
    ):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ShardError(f"{name} must be a positive integer, got {value!r}")
    root = _checked_root(Path(path))
    scan = _scan(root)
    errors: list[Problem] = list(scan.errors)
    warnings: list[str] = list(scan.warnings)
    headers: dict[str, Header] = {}
    for entry in scan.shards:
        try:
            headers[entry.name] = read_header(root / entry.name)
        except HeaderError as exc:
            errors.append(
                Problem(
                    exc.message,
                    file=entry.name,
                    path=exc.path,
                    fix="save the checkpoint again; this file is damaged",
                )
            )
        except OSError as exc:
            errors.append(Problem(f"cannot read: {exc.strerror or exc}", file=entry.name))
    stages = sorted({s.stage for s in scan.shards})
    ranks = sorted({s.rank for s in scan.shards})
    errors += _contiguity(scan.shards)
    errors += _consistency(scan.shards, headers)
    manifest, manifest_errors, hashes = _check_manifest(root, scan, verify)
    errors += manifest_errors
    if SHARD_MANIFEST_NAME not in scan.names:
        warnings.append(
            f"no {SHARD_MANIFEST_NAME}: the topology comes from the file names only "
            "(checkpoints saved through kvenv record it)"
            + ("; nothing to verify sha256 against" if verify else "")
        )
    elif verify and manifest is None:
        warnings.append(f"nothing verified: {SHARD_MANIFEST_NAME} could not be read")
    warnings += _stale_index(root, scan.names)
    topology = _topology(
        scan.pattern,
        len(ranks),
        len(stages),
        tensor_parallel_size,
        pipeline_parallel_size,
        manifest,
    )
    shards = tuple(
        attrs.evolve(
            entry,
            header_size=headers[entry.name].header_size if entry.name in headers else None,
            tensor_count=len(headers[entry.name].tensors) if entry.name in headers else None,
            tensor_bytes=headers[entry.name].tensor_bytes if entry.name in headers else None,
            dtypes=headers[entry.name].bytes_by_dtype() if entry.name in headers else {},
            sha256=hashes.get(entry.name),
        )
        for entry in scan.shards
    )
    missing: tuple[str, ...] = ()
    if manifest is not None and manifest.required_tensors is not None:
        held = {t.name for h in headers.values() for t in h.tensors}
        missing = tuple(sorted(set(manifest.required_tensors) - held))
    return ShardInspection(
        path=str(root),
        pattern=scan.pattern,
        rank_count=len(ranks),
        stage_count=len(stages),
        total_size=sum(s.size for s in shards),
        tensor_count=sum(len(h.tensors) for h in headers.values()),
        shards=shards,
        metadata_files=tuple(scan.metadata),
        missing_metadata=tuple(m for m in REQUIRED_METADATA if m not in scan.names),
        other_weight_files=tuple(scan.other_weights),
        manifest=manifest,
        verified=verify and manifest is not None and not manifest_errors,
        errors=tuple(errors),
        topology_errors=tuple(topology),
        warnings=tuple(warnings),
        missing_tensors=missing,
        verify_requested=verify,
    )


# --- scanning ----------------------------------------------------------------------------------


@attrs.frozen
class _Scan:
    pattern: Pattern | None
    shards: tuple[Shard, ...]
    names: frozenset[str]
    metadata: tuple[str, ...]
    other_weights: tuple[str, ...]
    errors: tuple[Problem, ...]
    warnings: tuple[str, ...]


def _checked_root(path: Path) -> Path:
    if path.is_symlink():
        raise ShardError(
            f"refusing a sharded checkpoint reached through a link: {path}",
            hint="pass the real directory",
        )
    if not path.exists():
        raise ShardError(f"sharded model directory does not exist: {path}")
    if not path.is_dir():
        raise ShardError(f"not a directory: {path}", hint="pass the checkpoint's directory")
    return path.absolute()


def _scan(root: Path) -> _Scan:
    found: list[Shard] = []
    metadata: list[str] = []
    other: list[str] = []
    errors: list[Problem] = []
    kinds: set[Pattern] = set()
    names: set[str] = set()
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        names.add(entry.name)
        _refuse_links(root, entry)
        if entry.is_dir(follow_symlinks=False):
            metadata.append(entry.name + "/")
            continue
        if not entry.is_file(follow_symlinks=False):
            raise ShardError(f"refusing a special file in a sharded checkpoint: {entry.path}")
        shard = _parse_name(entry.name, entry.stat(follow_symlinks=False).st_size)
        if shard is None:
            if entry.name.endswith(WEIGHT_SUFFIXES):
                other.append(entry.name)
            elif entry.name != SHARD_MANIFEST_NAME:
                metadata.append(entry.name)
            continue
        kind, parsed, numbers = shard
        kinds.add(kind)
        if any(str(int(v)) != v for v in numbers):
            errors.append(
                Problem(
                    "rank and part numbers must not have leading zeros; vLLM "
                    "never writes such names",
                    file=entry.name,
                    fix="rename it as vLLM writes it",
                )
            )
        found.append(parsed)
    if not found:
        raise ShardError(
            f"no rank-specific {TP_ONLY_PATTERN.replace('{', '<').replace('}', '>')} or "
            f"{PP_AND_TP_PATTERN.replace('{', '<').replace('}', '>')} files in {root}",
            hint="is this a sharded_state checkpoint? Save one with LLM.save_sharded_model",
        )
    if len(kinds) > 1:
        errors.append(
            Problem(
                "both model-rank-* and model-pp-*-tp-* files are present; vLLM loads only one "
                "pattern",
                file=str(root),
                fix="keep the files of one save only",
            )
        )
    pattern: Pattern = "pp-tp" if "pp-tp" in kinds else "tp"
    warnings = []
    if other:
        warnings.append(
            "other weight files are present and are not loaded by sharded_state: "
            + ", ".join(other)
        )
    return _Scan(
        pattern,
        tuple(sorted(found, key=lambda s: (s.stage, s.rank, s.part, s.name))),
        frozenset(names),
        tuple(metadata),
        tuple(other),
        tuple(errors),
        tuple(warnings),
    )


def _parse_name(name: str, size: int) -> tuple[Pattern, Shard, tuple[str, ...]] | None:
    """The pattern of a shard file's name, the shard, and its numbers as the name spells them."""
    match = _PP_RE.fullmatch(name)
    if match:
        stage, rank, part = (int(g) for g in match.groups())
        return "pp-tp", Shard(name, stage, rank, part, size), match.groups()
    match = _TP_RE.fullmatch(name)
    if match:
        rank, part = (int(g) for g in match.groups())
        return "tp", Shard(name, 0, rank, part, size), match.groups()
    return None


def _refuse_links(root: Path, entry: os.DirEntry[str]) -> None:
    paths = [entry.path]
    if entry.is_dir(follow_symlinks=False):  # and everything below it
        paths += [
            os.path.join(d, n) for d, dirs, files in os.walk(entry.path) for n in dirs + files
        ]
    for full in paths:
        if os.path.islink(full):
            raise ShardError(
                f"refusing symlink in a sharded checkpoint: {full} -> {os.readlink(full)}",
                hint="copy the real file into the directory",
            )


# --- checks ------------------------------------------------------------------------------------


def _contiguity(shards: Iterable[Shard]) -> list[Problem]:
    problems: list[Problem] = []
    by_stage: dict[int, dict[int, list[int]]] = {}
    for shard in shards:
        by_stage.setdefault(shard.stage, {}).setdefault(shard.rank, []).append(shard.part)
    stages = sorted(by_stage)
    problems += _gaps(stages, "pipeline stages are", "a stage's files are")
    rank_sets = {stage: sorted(ranks) for stage, ranks in by_stage.items()}
    for stage in stages:
        ranks = rank_sets[stage]
        label = f"stage {stage} " if len(stages) > 1 or stages != [0] else ""
        problems += _gaps(ranks, f"{label}rank sequence is", "a rank's files are")
        for rank in ranks:
            parts = sorted(by_stage[stage][rank])
            problems += _gaps(parts, f"part sequence for {label}rank {rank} is", "a part file is")
    if len({tuple(r) for r in rank_sets.values()}) > 1:
        problems.append(
            Problem(
                "pipeline stages hold different tensor-parallel ranks: "
                + "; ".join(f"stage {s}: {r}" for s, r in sorted(rank_sets.items()))
            )
        )
    return problems


def _gaps(numbers: list[int], what: str, lost: str) -> list[Problem]:
    """A problem when the sorted ``numbers`` are not 0, 1, 2, ...: something is missing."""
    if numbers == list(range(len(numbers))):
        return []
    return [
        Problem(
            f"{what} not contiguous from 0: {numbers}",
            fix=f"{lost} missing; save the checkpoint again",
        )
    ]


def _consistency(shards: Iterable[Shard], headers: Mapping[str, Header]) -> list[Problem]:
    """Every rank of a stage must hold the same tensor names, dtypes and shapes, once each."""
    problems: list[Problem] = []
    held: dict[tuple[int, int], dict[str, tuple[str, tuple[int, ...], str]]] = {}
    for shard in sorted(shards, key=lambda s: (s.stage, s.rank, s.part)):
        header = headers.get(shard.name)
        if header is None:
            continue
        table = held.setdefault((shard.stage, shard.rank), {})
        for tensor in header.tensors:
            if tensor.name in table:
                problems.append(
                    Problem(
                        f"tensor {tensor.name!r} is stored twice for this rank (also in "
                        f"{table[tensor.name][2]})",
                        file=shard.name,
                    )
                )
                continue
            table[tensor.name] = (tensor.dtype, tensor.shape, shard.name)
    stages = sorted({stage for stage, _ in held})
    for stage in stages:
        ranks = sorted(rank for s, rank in held if s == stage)
        base_rank = ranks[0]
        base = held[(stage, base_rank)]
        where = f"stage {stage} " if len(stages) > 1 else ""
        for rank in ranks[1:]:
            other = held[(stage, rank)]
            missing = sorted(set(base) - set(other))
            extra = sorted(set(other) - set(base))
            if missing:
                problems.append(
                    Problem(
                        f"{where}rank {rank} lacks {len(missing)} tensor(s) that rank {base_rank} "
                        f"holds: {_some(missing)}"
                    )
                )
            if extra:
                problems.append(
                    Problem(
                        f"{where}rank {rank} holds {len(extra)} tensor(s) that rank {base_rank} "
                        f"lacks: {_some(extra)}"
                    )
                )
            for name in sorted(set(base) & set(other)):
                (dtype_a, shape_a, file_a), (dtype_b, shape_b, file_b) = base[name], other[name]
                if shape_a != shape_b or dtype_a != dtype_b:
                    problems.append(
                        Problem(
                            f"tensor {name!r} is {dtype_a} {list(shape_a)} on rank {base_rank} "
                            f"({file_a}) but {dtype_b} {list(shape_b)} on rank {rank}",
                            file=file_b,
                        )
                    )
    return problems


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _stale_index(root: Path, names: frozenset[str]) -> list[str]:
    if HF_INDEX_NAME not in names:
        return []
    try:
        with open(root / HF_INDEX_NAME, encoding="utf-8") as handle:
            index = jsonio.loads_json(handle.read(), file=str(root / HF_INDEX_NAME))
        referenced = set(index["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [f"{HF_INDEX_NAME} could not be parsed"]
    if any(not isinstance(name, str) or name not in names for name in referenced):
        return [
            "The copied Hugging Face weight index references files absent from this "
            "directory; vLLM sharded_state loading uses rank-specific files instead."
        ]
    return []


def _topology(
    pattern: Pattern | None,
    ranks: int,
    stages: int,
    expected_tp: int | None,
    expected_pp: int | None,
    manifest: ShardManifest | None,
) -> list[str]:
    errors: list[str] = []
    if manifest is not None:
        if manifest.tensor_parallel_size != ranks:
            errors.append(
                f"{SHARD_MANIFEST_NAME} records tensor_parallel_size="
                f"{manifest.tensor_parallel_size} but the files hold {_count(ranks, 'rank')}"
            )
        if manifest.pipeline_parallel_size != stages:
            errors.append(
                f"{SHARD_MANIFEST_NAME} records pipeline_parallel_size="
                f"{manifest.pipeline_parallel_size} but the files hold {stages} stage(s)"
            )
    if expected_tp is not None and expected_tp != ranks:
        errors.append(
            f"checkpoint has {_count(ranks, 'rank')} (saved with tensor_parallel_size={ranks}) "
            f"but tensor_parallel_size={expected_tp} was requested; load it with "
            f"tensor_parallel_size={ranks}, or save it again from the source model at "
            f"tensor_parallel_size={expected_tp} (on {_count(expected_tp, 'GPU')}, or with "
            f"vLLM's CPU build on at least {_count(expected_tp, 'CPU core')})"
            + (" (a smaller size would load silently wrong weights)" if expected_tp < ranks else "")
        )
    if expected_pp is not None:
        if pattern == "tp" and expected_pp > 1:
            errors.append(
                f"checkpoint uses the tensor-parallel-only pattern ({TP_ONLY_PATTERN}), which "
                f"cannot be loaded with pipeline_parallel_size={expected_pp}; use "
                "pipeline_parallel_size=1"
            )
        elif pattern == "pp-tp" and expected_pp != stages:
            errors.append(
                f"checkpoint has {stages} pipeline stage(s) but pipeline_parallel_size="
                f"{expected_pp} was requested; load it with pipeline_parallel_size={stages}"
            )
    return errors


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


# --- the manifest ------------------------------------------------------------------------------


def read_shard_manifest(path: Path) -> ShardManifest:
    """Read ``kvenv-shards.json``; raise :class:`InputError` with every problem."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = jsonio.loads_json(handle.read(), file=str(path))
    except UnicodeDecodeError:
        raise InputError(
            f"invalid shard manifest: {path}", problems=[Problem("not UTF-8 text", file=str(path))]
        ) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid shard manifest: {path}",
            problems=[Problem(f"not valid JSON: {exc.msg} at line {exc.lineno}", file=str(path))],
        ) from None
    formats.newer_format(
        data, reads_up_to=formats.SHARDS_FORMAT, file=str(path), what="shard manifest"
    )
    manifest = convert.structure(
        data, ShardManifest, file=str(path), what="shard manifest", lenient=True
    )
    problems = []
    seen: set[str] = set()
    for i, item in enumerate(manifest.files):
        if item.size < 0:
            problems.append(
                Problem("size must not be negative", file=str(path), path=f"$.files[{i}].size")
            )
        if item.path in seen:
            problems.append(
                Problem(f"{item.path} is listed twice", file=str(path), path=f"$.files[{i}].path")
            )
        seen.add(item.path)
    if problems:
        raise InputError(f"invalid shard manifest: {path}", problems=problems)
    return manifest


def _check_manifest(
    root: Path, scan: _Scan, verify: bool
) -> tuple[ShardManifest | None, list[Problem], dict[str, str]]:
    path = root / SHARD_MANIFEST_NAME
    if SHARD_MANIFEST_NAME not in scan.names:
        return None, [], {}
    try:
        manifest = read_shard_manifest(path)
    except InputError as exc:
        return None, list(exc.problems) or [Problem(exc.message, file=SHARD_MANIFEST_NAME)], {}
    problems: list[Problem] = []
    hashes: dict[str, str] = {}
    listed = {item.path for item in manifest.files}
    for name in sorted({s.name for s in scan.shards} - listed):
        problems.append(
            Problem(
                f"shard {name} is not recorded in {SHARD_MANIFEST_NAME}",
                file=name,
                fix="remove the stray file or save again",
            )
        )
    for i, item in enumerate(manifest.files):
        where = f"$.files[{i}]"
        target = root / item.path
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            problems.append(
                Problem(
                    f"{item.path} is listed but missing",
                    file=SHARD_MANIFEST_NAME,
                    path=where,
                    fix="restore the file or save the checkpoint again",
                )
            )
            continue
        if not stat.S_ISREG(info.st_mode) or not _inside(root, item.path):
            problems.append(
                Problem(
                    f"{item.path} is not a regular file inside the checkpoint",
                    file=SHARD_MANIFEST_NAME,
                    path=where,
                )
            )
            continue
        if info.st_size != item.size:
            problems.append(
                Problem(
                    f"{item.path} is {info.st_size} bytes but the manifest records {item.size}",
                    file=SHARD_MANIFEST_NAME,
                    path=f"{where}.size",
                    fix="the file was changed or truncated; restore it",
                )
            )
            continue
        if verify:
            digest, _ = hashing.sha256_file(target)
            hashes[item.path] = digest
            if digest != item.sha256:
                problems.append(
                    Problem(
                        f"sha256 mismatch for {item.path}: expected {item.sha256}, got {digest}",
                        file=SHARD_MANIFEST_NAME,
                        path=f"{where}.sha256",
                        fix="the file is corrupt; restore it",
                    )
                )
    return manifest, problems, hashes


def _inside(root: Path, relpath: str) -> bool:
    parts = Path(relpath).parts
    if not parts or Path(relpath).is_absolute() or ".." in parts:
        return False
    current = root
    for part in parts[:-1]:
        current = current / part
        if current.is_symlink():
            return False
    return True


def build_shard_manifest(
    root: Path,
    *,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    pattern: str,
    vllm_version: str | None,
    dtype: str | None,
    quantization: str | None,
    source_model: str | None,
    required_tensors: list[str] | None = None,
    reload_check: ReloadRecord | None = None,
) -> ShardManifest:
    """Hash every regular file under ``root`` (links refused) into a manifest."""
    files: list[ManifestFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + dirnames:
            full = Path(dirpath) / name
            if full.is_symlink():
                raise ShardError(f"refusing symlink in a sharded checkpoint: {full}")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if rel == SHARD_MANIFEST_NAME or name.startswith(f".{SHARD_MANIFEST_NAME}"):
                continue
            files.append(
                ManifestFile(
                    RelPath(rel), full.stat().st_size, Sha256(hashing.sha256_file(full)[0])
                )
            )
    return ShardManifest(
        schema=1,
        kind="kvenv-shards",
        tensor_parallel_size=PositiveInt(tensor_parallel_size),
        pipeline_parallel_size=PositiveInt(pipeline_parallel_size),
        pattern=NonEmpty(pattern),
        files=files,
        vllm_version=vllm_version,
        dtype=dtype,
        quantization=quantization,
        source_model=source_model,
        required_tensors=required_tensors,
        kvenv_version=__version__,
        reload_check=reload_check,
    )


def write_shard_manifest(root: Path, manifest: ShardManifest) -> Path:
    """Write ``kvenv-shards.json`` atomically (through :mod:`kvenv._util.atomic`)."""
    target = root / SHARD_MANIFEST_NAME
    atomic.write_json(target, manifest_to_json(manifest))
    return target
