"""Malformed profiles: each gives one clear problem naming the file and the ``$.path`` of the
bad field, exit 1 from ``kvenv validate`` (2 when the file cannot be read at all) and exit 2 from
``kvenv show``; never a traceback. Single-field faults are also refused by the JSON Schema."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import tomli_w

from kvenv._util import tomlio
from kvenv.cli import main, schemas
from kvenv.errors import ProfileError, ProfileNotReadable
from kvenv.model.loading import load_profile
from tests.support.jsonschema_subset import validate
from tests.support.paths import REPO

ROOT = REPO
BASE = tomlio.read(ROOT / "profiles" / "kaggle-t4x2-cu128.toml")
PROFILE_SCHEMA = schemas.generate("profile")
HEX40 = "f6b4f10de54924ed6fe9e28cceab84eca7276ab6"
WHEEL = "vllm-0.18.2.dev0+ga26e8dc7f.d20260822.cu128-cp312-cp312-linux_x86_64.whl"

Mutation = Callable[[dict[str, Any]], None]


def put(dotted: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return mutate


def drop(dotted: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        node = doc
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        for m in mutations:
            m(doc)

    return mutate


@attrs.frozen
class Case:
    id: str
    change: Mutation | str  # a mutation of the built-in profile, or the raw file text
    path: str  # the $.path the one problem names
    says: str  # a phrase of its message
    schema_refuses: bool = True  # a single-field fault the JSON Schema also catches
    unreadable: bool = False  # not TOML at all: validate exits 2


CASES = [
    # wrong types
    Case("schema-as-string", put("schema", "1"), "$.schema", "expected one of 1"),
    Case("schema-2", put("schema", 2), "$.schema", "expected one of 1"),
    Case("description-int", put("description", 5), "$.description", "expected a string"),
    Case("python-float", put("target.python", 3.12), "$.target.python", "expected a string"),
    Case("gpu-count-string", put("target.gpu.count", "2"), "$.target.gpu.count", "integer"),
    Case("gpu-count-zero", put("target.gpu.count", 0), "$.target.gpu.count", "out of range"),
    Case("gpu-memory-negative", put("target.gpu.memory_mib", -1), "$.target.gpu.memory_mib",
         "out of range"),
    Case("capability-float", put("target.gpu.compute_capability", 7.5),
         "$.target.gpu.compute_capability", "expected a string"),
    Case("target-not-a-table", put("target", "kaggle"), "$.target", "expected a table"),
    Case("gpu-array-of-tables", put("target.gpu", [{"model": "T4", "count": 2}]), "$.target.gpu",
         "expected a table"),
    Case("platforms-not-array", put("target.platforms", "linux"), "$.target.platforms",
         "expected an array"),
    Case("eager-string", put("runtime.enforce_eager", "yes"), "$.runtime.enforce_eager",
         "true or false"),
    Case("eager-int", put("runtime.enforce_eager", 1), "$.runtime.enforce_eager",
         "true or false"),
    Case("env-value-int", put("runtime.env", {"VLLM_X": 1}), "$.runtime.env.VLLM_X",
         "expected a string"),
    # bad values
    Case("name-uppercase", put("name", "Kaggle"), "$.name", "lowercase"),
    Case("python-word", put("target.python", "three"), "$.target.python", "3.12"),
    Case("implementation", put("target.implementation", "jython"), "$.target.implementation",
         "expected one of"),
    Case("glibc-suffix", put("target.glibc", "2.35-ubuntu"), "$.target.glibc", "dotted"),
    Case("dtype-fp8", put("runtime.dtype", "fp8"), "$.runtime.dtype", "expected one of"),
    Case("gpu-util-above-1", put("runtime.gpu_memory_utilization", 1.5),
         "$.runtime.gpu_memory_utilization", "out of range"),
    Case("gpu-util-zero", put("runtime.gpu_memory_utilization", 0),
         "$.runtime.gpu_memory_utilization", "out of range"),
    Case("env-bad-name", put("runtime.env", {"BAD-NAME": "x"}), "$.runtime.env.BAD-NAME",
         "environment variable"),
    Case("native-version", put("native.version", "not a version"), "$.native.version",
         "PEP 440"),
    Case("native-size-zero", put("native.size", 0), "$.native.size", "out of range"),
    Case("repo-without-owner", put("native.source.repo", "binaries"), "$.native.source.repo",
         "owner/name"),
    Case("repo-type-space", put("native.source.repo_type", "space"),
         "$.native.source.repo_type", "expected one of"),
    Case("source-kind-ftp", put("native.source.kind", "ftp"), "$.native.source", "kind must be"),
    Case("filename-with-dir", put("native.source.filename", f"dist/{WHEEL}"),
         "$.native.source.filename", ".whl"),
    # hashes and revisions
    Case("sha256-short", put("native.sha256", "5a9bd710" * 7 + "5a9bd71"), "$.native.sha256",
         "64 lowercase hex"),
    Case("sha256-uppercase", put("native.sha256", BASE["native"]["sha256"].upper()),
         "$.native.sha256", "64 lowercase hex"),
    Case("sha256-not-hex", put("native.sha256", "g" * 64), "$.native.sha256", "64 lowercase"),
    Case("revision-branch", put("native.source.revision", "main"), "$.native.source.revision",
         "never a branch"),
    Case("revision-tag", put("native.source.revision", "v0.18.1"), "$.native.source.revision",
         "never a branch"),
    Case("revision-uppercase", put("native.source.revision", HEX40.upper()),
         "$.native.source.revision", "40-hex"),
    Case("revision-short", put("native.source.revision", HEX40[:7]), "$.native.source.revision",
         "40-hex"),
    # URLs and paths
    Case("http-url", put("native.source", {"kind": "url", "url": "http://example.invalid/x.whl"}),
         "$.native.source.url", "https://"),
    Case("http-index", put("native.source", {"kind": "index", "index_url": "http://x.invalid/"}),
         "$.native.source.index_url", "https://"),
    Case("path-source-traversal", put("native.source", {"kind": "path", "path": "../w/v.whl"}),
         "$.native.source.path", "traversal"),
    Case("lock-traversal", put("overlay.lock", "../../elsewhere/pylock.toml"), "$.overlay.lock",
         "traversal"),
    Case("lock-absolute", put("overlay.lock", "/etc/pylock.toml"), "$.overlay.lock", "relative"),
    Case("snapshot-traversal", put("host.snapshot", "profiles/../../host.json"),
         "$.host.snapshot", "traversal"),
    Case("root-relative", put("paths.root", "kvenv"), "$.paths.root", "absolute"),
    Case("cache-traversal", put("paths.cache", "/kaggle/../etc"), "$.paths.cache", "traversal"),
    # unknown keys at every level
    Case("unknown-top", put("colour", "blue"), "$", "unknown key(s): colour"),
    Case("unknown-target", put("target.arch", "x"), "$.target", "unknown key(s): arch"),
    Case("unknown-gpu", put("target.gpu.vram", 16), "$.target.gpu", "unknown key(s): vram"),
    Case("unknown-host", put("host.extra", []), "$.host", "unknown key(s): extra"),
    Case("unknown-waiver", put("host.waivers", [{"name": "x", "reason": "r", "why": "?"}]),
         "$.host.waivers[0]", "unknown key(s): why"),
    Case("unknown-native", put("native.url", "https://x.invalid"), "$.native",
         "unknown key(s): url"),
    Case("unknown-source", put("native.source.branch", "main"), "$.native.source",
         "unknown key(s): branch"),
    Case("unknown-overlay", put("overlay.requirements", "r.txt"), "$.overlay",
         "unknown key(s): requirements"),
    Case("unknown-paths", put("paths.venv", "/x"), "$.paths", "unknown key(s): venv"),
    Case("unknown-runtime", put("runtime.tp", 2), "$.runtime", "unknown key(s): tp"),
    # required keys
    Case("no-schema", drop("schema"), "$.schema", "required key is missing"),
    Case("no-python", drop("target.python"), "$.target.python", "required key is missing"),
    Case("no-sha256", drop("native.sha256"), "$.native.sha256", "required key is missing"),
    Case("waiver-without-reason", put("host.waivers", [{"name": "xformers"}]),
         "$.host.waivers[0].reason", "required key is missing"),
    Case("waiver-empty-reason", put("host.waivers", [{"name": "xformers", "reason": " "}]),
         "$.host.waivers[0].reason", "non-empty"),
    Case("record-waiver-without-reason", put("overlay.record_waivers", [{"name": "x"}]),
         "$.overlay.record_waivers[0].reason", "required key is missing"),
    # rules across fields (the schema cannot express them)
    Case("abi-mismatch", put("target.abi", "cp311"), "$.target.abi", "does not match Python",
         schema_refuses=False),
    Case("tp-above-gpus", put("runtime.tensor_parallel_size", 4),
         "$.runtime.tensor_parallel_size", "exceeds the target's 2 GPU(s)", schema_refuses=False),
    Case("torch-twice", put("host.protected", ["torch", "torchvision", "torch"]),
         "$.host.protected[2]", "listed twice", schema_refuses=False),
    Case("torch-twice-spelled", put("host.protected", ["torch", "Torch"]),
         "$.host.protected[1]", "listed twice", schema_refuses=False),
    Case("duplicate-waivers", put("host.waivers", [{"name": "x_y", "reason": "a"},
                                                   {"name": "X.Y", "reason": "b"}]),
         "$.host.waivers[1].name", "waived twice", schema_refuses=False),
    Case("duplicate-record-waivers", put("overlay.record_waivers", [{"name": "a_b", "reason": "r"},
                                                           {"name": "A-b", "reason": "r"}]),
         "$.overlay.record_waivers[1].name", "waived twice", schema_refuses=False),
    Case("record-waiver-protected", put("overlay.record_waivers", [{"name": "Torch",
                                                                   "reason": "r"}]),
         "$.overlay.record_waivers[0].name", "protected on the host", schema_refuses=False),
    Case("native-protected", both(put("native.name", "torch"), put("native.version", "2.10.0"),
                                  put("native.source.filename",
                                      "torch-2.10.0-cp312-cp312-linux_x86_64.whl")),
         "$.native.name", "protected on the host", schema_refuses=False),
    Case("wheel-of-other-name", put("native.source.filename", WHEEL.replace("vllm", "vllm_x")),
         "$.native.source.filename", "the wheel is for 'vllm-x'", schema_refuses=False),
    Case("wheel-of-other-version", put("native.source.filename",
                                       "vllm-0.18.1-cp312-cp312-linux_x86_64.whl"),
         "$.native.source.filename", "differs from native.version", schema_refuses=False),
    Case("wheel-name-malformed", put("native.source.filename", "vllm.whl"),
         "$.native.source.filename", "not a valid wheel file name", schema_refuses=False),
    # extends
    Case("extends-int", put("extends", 3), "$.extends", "profile name or a .toml path"),
    Case("extends-empty", put("extends", ""), "$.extends", "profile name or a .toml path"),
    Case("extends-missing-name", put("extends", "no-such-parent"), "$.extends",
         "'no-such-parent' not found", schema_refuses=False),
    Case("extends-missing-file", put("extends", "parents/none.toml"), "$.extends", "not found",
         schema_refuses=False),
    Case("extends-self", put("extends", "bad.toml"), "$.extends", "extends itself",
         schema_refuses=False),
    # not TOML
    Case("toml-syntax", "schema = \nname = 'x'\n", "$", "Invalid value", unreadable=True),
    Case("toml-duplicate-key", "schema = 1\nschema = 1\n", "$", "Cannot overwrite",
         unreadable=True),
    Case("toml-duplicate-table", "[target]\n[target]\n", "$", "Cannot declare",
         unreadable=True),
]  # fmt: skip


def test_there_are_at_least_thirty_distinct_cases() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def _write(case: Case, directory: Path) -> Path:
    path = directory / "bad.toml"
    if isinstance(case.change, str):
        path.write_text(case.change, encoding="utf-8")
    else:
        doc = copy.deepcopy(BASE)
        case.change(doc)
        path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_clear_problem_naming_file_and_field(case: Case, project: Path) -> None:
    path = _write(case, project)
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    error = info.value
    assert isinstance(error, ProfileNotReadable) == case.unreadable
    assert len(error.problems) == 1, error.render()
    (problem,) = error.problems
    assert problem.path == case.path, error.render()
    assert case.says in problem.message, error.render()
    assert problem.file == str(path)
    rendered = error.render()
    assert f"{path}: {case.path}: " in rendered


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_exit_codes_and_messages(
    case: Case, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(case, project)
    assert main(["validate", str(path)]) == (2 if case.unreadable else 1)
    printed = capsys.readouterr()
    assert f"{case.path}: " in printed.out
    assert "bad.toml" in printed.out
    assert main(["show", str(path)]) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    assert f"bad.toml: {case.path}: " in printed.err
    assert "Traceback" not in printed.err


@pytest.mark.parametrize("case", [c for c in CASES if not isinstance(c.change, str)],
                         ids=lambda c: c.id)  # fmt: skip
def test_the_json_schema_agrees(case: Case) -> None:
    doc = copy.deepcopy(BASE)
    assert validate(doc, PROFILE_SCHEMA) == []
    assert not isinstance(case.change, str)
    case.change(doc)
    assert bool(validate(doc, PROFILE_SCHEMA)) == case.schema_refuses


def test_all_problems_of_a_file_are_reported_at_once(project: Path) -> None:
    doc = copy.deepcopy(BASE)
    doc["target"]["gpu"]["count"] = "two"
    doc["native"]["sha256"] = "abc"
    doc["runtime"]["dtype"] = "fp8"
    doc["paths"]["extra"] = 1
    path = project / "many.toml"
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert sorted(p.path or "" for p in info.value.problems) == [
        "$.native.sha256",
        "$.paths",
        "$.runtime.dtype",
        "$.target.gpu.count",
    ]


def test_two_file_cycle_is_named(project: Path) -> None:
    (project / "a.toml").write_text('schema = 1\nname = "a"\nextends = "b.toml"\n')
    (project / "b.toml").write_text('schema = 1\nname = "b"\nextends = "a.toml"\n')
    with pytest.raises(ProfileError) as info:
        load_profile("a.toml")
    assert "cycle" in info.value.message
    assert [p.path for p in info.value.problems] == ["$.extends"]
    assert main(["validate", "a.toml"]) == 1


def test_a_fault_in_a_parent_names_the_parent_file(project: Path) -> None:
    parent = copy.deepcopy(BASE)
    parent["name"] = "base"
    parent["native"]["sha256"] = "0" * 63
    (project / "profiles").mkdir()
    (project / "profiles" / "base.toml").write_text(tomli_w.dumps(parent))
    (project / "child.toml").write_text('schema = 1\nname = "child"\nextends = "base"\n')
    with pytest.raises(ProfileError) as info:
        load_profile("child.toml")
    (problem,) = info.value.problems
    assert problem.path == "$.native.sha256"
    assert problem.file == str(project / "profiles" / "base.toml")


def test_missing_file_and_unknown_name_are_unreadable(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "missing.toml"]) == 2
    assert main(["validate", "no-such-profile"]) == 2
    assert main(["validate", "Not A Name"]) == 2
    printed = capsys.readouterr().out
    assert "profile file not found: missing.toml" in printed
    assert "no profile named 'no-such-profile'" in printed
    assert main(["show", "missing.toml"]) == 2
    assert "profile file not found" in capsys.readouterr().err


def test_a_dangling_link_by_name_is_named_not_passed_over(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken ``profiles/NAME.toml`` link is reported as what it is; the name does not fall
    through to a built-in profile of the same name, nor get "did you mean" itself."""
    (project / "profiles").mkdir()
    (project / "profiles" / "demo.toml").symlink_to(project / "gone.toml")
    assert main(["validate", "demo"]) == 2
    printed = capsys.readouterr().out
    assert f"profile {project / 'profiles' / 'demo.toml'} is a link to" in printed
    assert "which is not a file" in printed and "did you mean" not in printed
    (project / "gone.toml").write_text((REPO / "profiles" / "demo.toml").read_text())
    assert main(["validate", "demo"]) == 0  # mended: the link's target is read


def test_not_utf8_is_unreadable(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "latin.toml").write_bytes(b'schema = 1\nname = "caf\xe9"\n')
    assert main(["validate", "latin.toml"]) == 2
    assert "not UTF-8" in capsys.readouterr().out


def test_a_directory_is_unreadable(project: Path) -> None:
    (project / "dir.toml").mkdir()
    assert main(["validate", "dir.toml"]) == 2


def test_an_unknown_name_says_every_place_searched_and_the_close_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``no profile named 'dmeo'``: the hint names each directory searched with what it is
    (the project's, ``$KVENV_PROFILE_PATH``, the built-ins) and suggests ``demo``."""
    from kvenv.model.loading import builtin_dir

    extra = tmp_path / "mine"
    extra.mkdir()
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(extra))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "dmeo"]) == 2
    hint = capsys.readouterr().err
    assert "did you mean 'demo'?" in hint
    assert f"{tmp_path / 'profiles'} (the project's)" in hint
    assert f"{extra} ($KVENV_PROFILE_PATH)" in hint
    assert f"{builtin_dir()} (the built-ins)" in hint
