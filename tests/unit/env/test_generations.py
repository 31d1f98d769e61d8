"""Kept generations against really applied roots: how many an apply keeps (``--keep``,
``$KVENV_KEEP_GENERATIONS``), what ``kvenv list`` and ``kvenv generations`` report, and
``kvenv rollback``: an atomic switch to a kept generation that still verifies, refused (exit 1,
nothing changed) for one that does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.env.generations import (
    complete_generations,
    generation_infos,
    installed_rows,
    keep_count,
    retained,
    rollback,
    rollback_target,
)
from kvenv.env.root import current_manifest, read_pointer
from kvenv.errors import CheckFailed, InputError, UsageError
from kvenv.model.locations import Locations
from tests.support.applyenv import (
    apply,
    fake_host_site,
    helper_wheel,
    host_snapshot,
    locations,
    native_wheel,
    write_project,
)


def _apply_versions(tmp: Path, values: list[str], *, keep: int = 2) -> tuple[Locations, Path]:
    """Apply the project once per value of its ``[runtime.env] V`` (each a new generation)."""
    wheels = tmp / "wheels"
    native, helper = native_wheel(wheels), helper_wheel(wheels)
    host = host_snapshot(fake_host_site(tmp))
    where = locations(tmp)
    project = None
    for value in values:
        project = write_project(tmp, native=native, overlay=[helper], env={"V": value})
        result = apply(project.loaded(), project.lock(), host, where, keep=keep)
        assert result.status == "applied"
    assert project is not None
    return where, project.profile_path


def test_keep_count_and_retained() -> None:
    assert keep_count(None, {}) == 2
    assert keep_count(None, {"KVENV_KEEP_GENERATIONS": "5"}) == 5
    assert keep_count(3, {"KVENV_KEEP_GENERATIONS": "5"}) == 3  # the flag wins
    for flag, env in ((1, {}), (None, {"KVENV_KEEP_GENERATIONS": "x"})):
        with pytest.raises(UsageError, match="at least 2"):
            keep_count(flag, env)
    gens = ["g1", "g2", "g3", "g4"]
    assert retained({"g4", "g3"}, gens, 2) == {"g4", "g3"}
    assert retained({"g4", "g1"}, gens, 3) == {"g4", "g1", "g3"}  # then the newest others
    assert retained({"g4"}, gens, 10) == set(gens)
    assert rollback_target(gens, "g3", None) == "g2"
    assert rollback_target(gens, "g3", "g4") == "g4"
    with pytest.raises(InputError, match="no older"):
        rollback_target(gens, "g1", None)
    with pytest.raises(InputError, match="no kept generation"):
        rollback_target(gens, "g3", "../../etc")


def test_apply_keeps_n_and_prunes_the_rest(tmp_path: Path) -> None:
    where, _ = _apply_versions(tmp_path, ["1", "2", "3", "4"], keep=3)
    assert len(complete_generations(where)) == 3
    # the default: the new generation and the one before it
    wheels = tmp_path / "wheels"
    project = write_project(
        tmp_path,
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels)],
        env={"V": "5"},
    )
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    kept = complete_generations(where)
    assert len(kept) == 2 and result.generation == kept[-1]
    assert len(result.removed) == 2


def test_list_generations_and_rollback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where, profile = _apply_versions(tmp_path, ["1", "2", "3"], keep=3)
    args = [str(profile), "--root", str(where.root), "--cache", str(where.cache)]
    first, second, third = complete_generations(where)

    assert main(["list", *args, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["generation"] == third
    rows = {(r["name"], r["origin"]) for r in listed["distributions"]}
    assert {("nativepkg", "native"), ("helper", "overlay"), ("torch", "host")} <= rows
    manifest = current_manifest(where.root)
    assert manifest is not None
    assert [r.origin for r in installed_rows(manifest)][:2] == ["native", "overlay"]

    assert main(["generations", *args, "--json"]) == 0
    infos = json.loads(capsys.readouterr().out)["generations"]
    assert [i["generation"] for i in infos] == [first, second, third]
    assert [i["current"] for i in infos] == [False, False, True]
    assert len({i["profile_digest"] for i in infos}) == 3
    assert all(i["lock_digest"] and i["created_at"] for i in infos)

    # default: the one before the current; the pointer and the activation scripts follow
    assert main(["rollback", *args]) == 0
    assert "generation " + second in capsys.readouterr().out
    pointer = read_pointer(where.root)
    assert pointer is not None and (pointer.generation, pointer.previous) == (second, third)
    assert second in (where.root / "activate.sh").read_text()
    assert [i.current for i in generation_infos(where)] == [False, True, False]

    # by id, forward again; naming the current one changes nothing
    assert main(["rollback", str(profile), third, "--root", str(where.root)]) == 0
    assert rollback(where, third).changed is False
    capsys.readouterr()

    # a generation that no longer verifies is refused, exit 1, and nothing changes
    victim = where.root / "generations" / first / "overlay" / "helper" / "__init__.py"
    victim.write_text(victim.read_text() + "# edited\n")
    before = (where.root / "current.json").read_bytes()
    assert main(["rollback", str(profile), first, "--root", str(where.root), "--json"]) == 1
    error = json.loads(capsys.readouterr().out)
    assert "no longer verifies" in error["message"]
    assert (where.root / "current.json").read_bytes() == before
    with pytest.raises(CheckFailed):
        rollback(where, first)

    # an unknown id is bad input (exit 2)
    assert (
        main(["rollback", str(profile), "20000101T000000-aaaaaa", "--root", str(where.root)]) == 2
    )
    assert "no kept generation" in capsys.readouterr().err


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where, profile = _apply_versions(tmp_path, ["1", "2"])
    args = [str(profile), "--root", str(where.root)]
    assert main(["list", *args]) == 0
    text = capsys.readouterr().out
    assert "nativepkg" in text and "native" in text and "overlay" in text
    # the host has torch, not torchvision/torchaudio: those are absent, not "host (unknown)"
    assert "(unknown)" not in text
    assert "protected, absent on the host when applied: torchaudio, torchvision" in text
    assert main(["list", *args, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["host_absent"] == ["torchaudio", "torchvision"]
    assert {r["name"] for r in listed["distributions"] if r["origin"] == "host"} == {"torch"}
    assert main(["generations", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("* ")


def test_nothing_applied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheels = tmp_path / "wheels"
    project = write_project(tmp_path, native=native_wheel(wheels), overlay=[helper_wheel(wheels)])
    args = [str(project.profile_path), "--root", str(tmp_path / "none")]
    assert main(["list", *args]) == 2
    assert "nothing is applied" in capsys.readouterr().err
    assert main(["generations", *args]) == 0
    assert "no generations" in capsys.readouterr().out
    assert main(["rollback", *args]) == 2


def test_noop_fast_path_honours_keep(tmp_path: Path) -> None:
    from kvenv.env.apply import noop_fast
    from tests.support.applyenv import LOCAL_TARGET

    wheels = tmp_path / "wheels"
    native, helper = native_wheel(wheels), helper_wheel(wheels)
    host = host_snapshot(fake_host_site(tmp_path))
    where = locations(tmp_path)
    for value in ("1", "2", "3"):
        project = write_project(
            tmp_path, native=native, overlay=[helper], env={"V": value}, target=LOCAL_TARGET
        )
        apply(project.loaded(), project.lock(), host, where, keep=3)
    assert len(complete_generations(where)) == 3
    # nothing to do while 3 are kept; with 2, the extra generation must go: the full path
    assert noop_fast(project.loaded(), where, lambda: host, lambda: None, keep=3) is not None
    assert noop_fast(project.loaded(), where, lambda: host, lambda: None) is None
    result = apply(project.loaded(), project.lock(), host, where)
    assert result.status == "up-to-date" and len(result.removed) == 1
    assert len(complete_generations(where)) == 2
