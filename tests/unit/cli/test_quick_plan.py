"""The recalled answer of ``kvenv plan`` (kvenv.env.answers.recall_answer): the same bytes on
stdout and stderr and the same exit code as the full path (text, ``--json``, ``--quiet``,
``--host SNAPSHOT``), and every input the full path reads (the lock, the profile, the cache
and store entries it looks up, the host's packages and interpreter, the root, a ``--host``
file) changed makes the command take the full path again, which then says something else.

Each command runs as a real process through the wrapper of ``test_quick_paths`` (it reports
whether the full path's modules were imported).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.applyenv import local_project
from tests.unit.cli.test_quick_paths import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    runner = Cli(tmp_path, local_project(tmp_path / "proj"))
    code, out, err = runner.run("apply", runner.profile)
    assert code == 0 and "applied" in out, (out, err)
    return runner


def _recalled(cli: Cli, *argv: str) -> tuple[int, str, str]:
    """Run ``plan`` until its answer is recorded (the first full run writes the profile's
    facts, the second the plan's answer) and check the next run recalls it."""
    cli.run("plan", *argv)
    cli.run("plan", *argv)
    done = cli.run("plan", *argv)
    assert cli.taken == "quick", done
    return done


def _full_again(cli: Cli, *argv: str) -> tuple[int, str, str]:
    """The next plan takes the full path; what it says is what the full path says without
    any record (the fast path left nothing stale behind)."""
    done = cli.run("plan", *argv)
    assert cli.taken == "full", done
    cli.forget()
    assert cli.run("plan", *argv) == done
    return done


def test_recalled_plan_prints_what_the_full_path_prints(cli: Cli) -> None:
    cli.run("plan", cli.profile)  # the profile's facts are recorded by a first full run
    code, out, err = cli.both("plan", cli.profile)
    assert code == 0 and err == ""
    assert "up to date: the applied generation matches" in out and "compatible: yes" in out
    code, out, _ = cli.both("plan", cli.profile, "--json")
    assert code == 0 and json.loads(out)["up_to_date"] is True
    assert cli.both("plan", "--quiet", cli.profile)[1] == cli.both("plan", cli.profile)[1]


def test_incompatible_plan_is_never_recalled(cli: Cli) -> None:
    """Only a plan that succeeded is recorded: one that exits 3 is decided afresh each time."""
    first = cli.run("plan", "--strict", cli.profile)  # a warning is an error with --strict
    assert first[0] == 3 and "compatible: no" in first[1]
    for _ in range(2):
        assert cli.run("plan", "--strict", cli.profile) == first and cli.taken == "full"


def test_note_on_stderr_is_the_same(cli: Cli) -> None:
    env = {k: v for k, v in cli.env.items() if k != "KVENV_PYTHON"}
    env["PATH"] = str(cli.tmp / "empty-path")  # no python3 on PATH: kvenv's own, with a note
    cli.run("plan", cli.profile, env=env)
    cli.forget()
    slow = cli.run("plan", cli.profile, env=env)
    assert cli.taken == "full"
    fast = cli.run("plan", cli.profile, env=env)
    assert cli.taken == "quick"
    assert fast == slow and "note: no host interpreter found" in fast[2]


def test_host_snapshot_file_recalled_and_watched(cli: Cli) -> None:
    snapshot = cli.tmp / "host.json"
    code, out, err = cli.run("fingerprint", "--save", str(snapshot))
    assert code == 0, (out, err)
    argv = (cli.profile, "--host", str(snapshot))
    cli.run("plan", *argv)
    assert cli.both("plan", *argv)[0] == 0
    data = json.loads(snapshot.read_text())
    data["python"]["version"] = "3.0.1"  # another host: the plan's findings change
    snapshot.write_text(json.dumps(data))
    changed = _full_again(cli, *argv)
    assert changed != _recalled(cli, cli.profile)


def test_edited_lock_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    with cli.project.lock_path.open("a") as handle:
        handle.write("\n")  # another lock digest
    after = _full_again(cli, cli.profile)
    assert after != before and "up to date" not in after[1]


def test_edited_profile_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    path = cli.project.profile_path
    path.write_text(path.read_text().replace("[runtime.env]\n", '[runtime.env]\nX = "1"\n'))
    after = _full_again(cli, cli.profile)
    assert after != before and "up to date" not in after[1]


def _cache_entries(cli: Cli) -> list[Path]:
    entries = sorted((cli.tmp / "cache" / "artifacts-v1" / "sha256").glob("*/*"))
    assert entries
    return entries


def _store_entries(cli: Cli) -> list[Path]:
    entries = sorted(p for p in (cli.tmp / "cache" / "store").iterdir() if len(p.name) == 64)
    assert entries
    return entries


def test_artifact_removed_from_the_cache_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    entry = _cache_entries(cli)[0]
    shutil.rmtree(entry)
    after = _full_again(cli, cli.profile)
    assert after != before and "download 1 artifact" in after[1], after[1]


@pytest.mark.parametrize("how", ["marker removed", "marker damaged", "entry removed"])
def test_store_entry_damaged_or_removed_takes_the_full_path(cli: Cli, how: str) -> None:
    before = _recalled(cli, cli.profile)
    entry = _store_entries(cli)[0]
    marker = entry / ".kvenv-store.json"
    if how == "marker removed":
        marker.unlink()
    elif how == "marker damaged":
        marker.write_text(marker.read_text().replace('"sha256"', '"sha_256"', 1))
    else:
        entry.chmod(0o755)
        for sub in entry.rglob("*"):
            if sub.is_dir():
                sub.chmod(0o755)
        shutil.rmtree(entry)
    after = _full_again(cli, cli.profile)
    assert after != before and "1 to unpack into the store" in after[1], after[1]


def test_host_package_installed_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    dist = cli.extra / "newpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: newpkg\nVersion: 1.0\n")
    assert _full_again(cli, cli.profile)[0] == before[0]
    assert _recalled(cli, cli.profile)[0] == 0  # recorded again for the new host


def test_another_interpreter_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    other = cli.tmp / "other-python"
    other.symlink_to(sys.executable)
    after = _full_again(cli, cli.profile, "--python", str(other))
    assert after != before and str(other) in after[1]


def test_another_root_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    after = _full_again(cli, cli.profile, "--root", str(cli.tmp / "elsewhere"))
    assert after != before and "current generation: none" in after[1]


def test_applied_generation_changed_takes_the_full_path(cli: Cli) -> None:
    before = _recalled(cli, cli.profile)
    generation = cli.current_generation()
    with cli.project.lock_path.open("a") as handle:
        handle.write("\n")
    assert cli.run("apply", cli.profile)[0] == 0  # a new generation for the new lock
    after = _recalled(cli, cli.profile)
    assert generation not in after[1] and cli.current_generation() in after[1]
    assert after != before


def test_verbose_takes_the_full_path(cli: Cli) -> None:
    _recalled(cli, cli.profile)
    code, _, err = cli.run("plan", "--verbose", cli.profile)
    assert (code, cli.taken) == (0, "full") and "runtime root:" in err


def test_plan_before_the_first_apply_recalled_until_the_root_appears(cli: Cli) -> None:
    cli.env["KVENV_ROOT"] = str(cli.tmp / "fresh-root")  # nothing there yet
    before = _recalled(cli, cli.profile)
    assert "current generation: none" in before[1]
    assert not (cli.tmp / "fresh-root").exists()  # the plan created nothing
    assert cli.run("apply", cli.profile)[0] == 0
    after = _full_again(cli, cli.profile)
    assert "up to date: the applied generation matches" in after[1]


def test_another_interpreter_as_the_host_is_recalled_and_watched(cli: Cli) -> None:
    """The host a separate venv: recalled by the identity its facts are memoized under
    (kvenv.probe.hostmemo.interpreter_deps), its distributions watched as for apply."""
    import venv

    home = cli.tmp / "host-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
    cli.env["KVENV_PYTHON"] = str(home / "bin" / "python")
    before = _recalled(cli, cli.profile)
    assert str(home / "bin" / "python") in before[1]
    (site,) = home.glob("lib/python*/site-packages")
    dist = site / "zz_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-pkg\nVersion: 1.0\n")
    _full_again(cli, cli.profile)
