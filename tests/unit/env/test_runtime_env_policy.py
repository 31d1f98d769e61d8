"""Environment names that change how processes load code are refused in a profile's
``[runtime.env]`` unless ``[runtime.allow_env]`` allows each with a reason; the names kvenv
sets itself (PATH, PYTHONPATH, LD_LIBRARY_PATH, KVENV_*) are refused always."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvenv.errors import ProfileError
from kvenv.model.loading import load_profile, profile_digest
from tests.support.applyenv import standard_project
from tests.support.hardening import run_cli

LOADERS = [
    "LD_PRELOAD", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PYTHONSTARTUP", "PYTHONINSPECT",
    "PYTHONHOME", "BASH_ENV", "ENV", "PERL5OPT", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS",
]  # fmt: skip
RESERVED = ["PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "KVENV_MANIFEST"]


def _with_env(tmp_path: Path, lines: str) -> Path:
    """``lines`` at the top of ``[runtime.env]``; a ``[runtime.allow_env]`` table in them is
    moved to the end of the file."""
    env, _, allow = lines.partition("[runtime.allow_env]\n")
    project = standard_project(tmp_path / "proj")
    text = project.profile_path.read_text()
    text = text.replace("[runtime.env]\n", f"[runtime.env]\n{env}")
    if allow:
        text += f"[runtime.allow_env]\n{allow}"
    project.profile_path.write_text(text)
    return project.profile_path


@pytest.mark.parametrize("name", LOADERS)
def test_loader_names_are_refused(tmp_path: Path, name: str) -> None:
    path = _with_env(tmp_path, f'{name} = "/tmp/x"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    problem = info.value.problems[0]
    assert problem.path == f"$.runtime.env.{name}"
    assert "allow_env" in (problem.fix or "")
    result = run_cli(["plan", str(path), "--json"])  # the error is JSON on stdout
    assert result.code == 2 and result.err == "", result.err
    error = json.loads(result.out)
    assert f"$.runtime.env.{name}" in [p["path"] for p in error["problems"]]
    assert run_cli(["plan", str(path)]).err.count(f"$.runtime.env.{name}") == 1


@pytest.mark.parametrize("name", RESERVED)
def test_names_kvenv_sets_are_refused_even_when_allowed(tmp_path: Path, name: str) -> None:
    path = _with_env(tmp_path, f'{name} = "/tmp/x"\n[runtime.allow_env]\n{name} = "because"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert name in info.value.render()
    assert any(p.path == f"$.runtime.env.{name}" for p in info.value.problems)


def test_a_loader_name_allowed_with_a_reason_is_accepted(tmp_path: Path) -> None:
    path = _with_env(
        tmp_path, 'LD_PRELOAD = "/opt/jemalloc.so"\n[runtime.allow_env]\nLD_PRELOAD = "jemalloc"\n'
    )
    loaded = load_profile(str(path))
    assert loaded.profile.runtime.env["LD_PRELOAD"] == "/opt/jemalloc.so"
    assert loaded.profile.runtime.allow_env == {"LD_PRELOAD": "jemalloc"}


def test_an_allowance_needs_a_reason(tmp_path: Path) -> None:
    path = _with_env(tmp_path, 'LD_PRELOAD = "/x.so"\n[runtime.allow_env]\nLD_PRELOAD = ""\n')
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert "$.runtime.allow_env.LD_PRELOAD" in info.value.render()


def test_no_allowances_keep_the_digest(tmp_path: Path) -> None:
    """A profile without ``allow_env`` has the digest its locks already record."""
    loaded = load_profile(str(_with_env(tmp_path, "")))
    data_digest = profile_digest(loaded.profile)
    assert loaded.profile.runtime.allow_env == {}
    import json

    from kvenv.model.loading import profile_to_dict

    data = profile_to_dict(loaded.profile)
    data["runtime"].pop("allow_env")
    data.get("host", {}).pop("python", None)
    if not data["overlay"]["record_waivers"]:
        del data["overlay"]["record_waivers"]
    for declared in ("requires", "constraints"):  # none declared: left out of the digest too
        if not data["overlay"][declared]:
            del data["overlay"][declared]
    import hashlib

    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert data_digest == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
