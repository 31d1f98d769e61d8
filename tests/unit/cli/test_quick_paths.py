"""The recalled answers of ``kvenv apply`` (no-op) and ``kvenv status`` (kvenv.env.answers): the
same bytes on stdout and stderr and the same exit code as the full path, and every change the
full path would notice (lock, profile, manifest, pointer, activation scripts, generations,
owner, an apply in progress, the host's packages and environment, another interpreter) makes
the command take the full path again.

Each command runs as a real process (the CLI as users run it) through a wrapper that reports
whether the full path's modules were imported, which is how a test tells the two paths apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.applyenv import Project, local_project

REPO_ROOT = Path(__file__).resolve().parents[3]
WRAPPER = """\
import atexit, os, sys
def _report():
    with open(os.environ["QUICKTEST_OUT"], "w") as out:
        full = {"kvenv.env.apply", "kvenv.env.applied", "kvenv.fetch.bundle"} & set(sys.modules)
        out.write("full" if full else "quick")
atexit.register(_report)
from kvenv.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


class Cli:
    """Runs kvenv for one project, root and cache; remembers which path the last run took."""

    def __init__(self, tmp: Path, project: Project) -> None:
        self.tmp = tmp
        self.project = project
        bindir = tmp / "wrapper"
        bindir.mkdir()
        self.wrapper = bindir / "kvenv_wrapper.py"
        self.wrapper.write_text(WRAPPER)
        self.report = tmp / "path-taken"
        self.extra = tmp / "host-extra"  # on the host's import path: "installs" go here
        self.extra.mkdir()
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("KVENV_", "VIRTUAL_ENV"))
        }
        self.env.update(
            KVENV_ROOT=str(tmp / "root"),
            KVENV_CACHE_DIR=str(tmp / "cache"),
            KVENV_PYTHON=sys.executable,
            QUICKTEST_OUT=str(self.report),
            PYTHONPATH=os.pathsep.join([str(self.extra), str(REPO_ROOT)]),
        )
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self.taken = ""

    def run(self, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, str(self.wrapper), *argv],
            env=env or self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.taken = self.report.read_text()
        return done.returncode, done.stdout, done.stderr

    def forget(self) -> None:
        """Remove every recorded answer (the next run takes the full path)."""
        for kind in ("answer", "generation", "bundle"):
            shutil.rmtree(self.tmp / "cache" / "memo-v1" / kind, ignore_errors=True)

    def both(self, *argv: str) -> tuple[int, str, str]:
        """Run ``argv`` by the full path and by the recalled answer; they must agree."""
        self.forget()
        slow = self.run(*argv)
        assert self.taken == "full"
        fast = self.run(*argv)
        assert self.taken == "quick", (argv, fast)
        assert fast == slow
        return fast

    @property
    def profile(self) -> str:
        return str(self.project.profile_path)

    def current_generation(self) -> str:
        pointer = json.loads((self.tmp / "root" / "current.json").read_text())
        return str(pointer["generation"])


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    project = local_project(tmp_path / "proj")
    runner = Cli(tmp_path, project)
    code, out, err = runner.run("apply", runner.profile)
    assert code == 0, (out, err)
    assert "applied" in out
    return runner


def _quick_noop(cli: Cli) -> None:
    """Make the no-op recorded and check it is recalled."""
    cli.run("apply", cli.profile)
    code, out, _ = cli.run("apply", cli.profile)
    assert (code, cli.taken) == (0, "quick")
    assert out.startswith("already up to date")


def test_noop_apply_recalled_prints_what_the_full_path_prints(cli: Cli) -> None:
    code, out, err = cli.both("apply", cli.profile)
    assert code == 0
    assert out == (
        f"already up to date: generation {cli.current_generation()} in {cli.tmp / 'root'}; "
        "nothing to do\n"
    )
    assert err == ""
    assert cli.both("apply", "--quiet", cli.profile) == (code, out, err)


def test_status_recalled_prints_what_the_full_path_prints(cli: Cli) -> None:
    code, out, _ = cli.both("status", cli.profile)
    assert code == 0 and "current: yes" in out
    code, out, _ = cli.both("status", cli.profile, "--json")
    assert json.loads(out)["current"] is True


def test_note_on_stderr_is_the_same(cli: Cli) -> None:
    """kvenv's own interpreter chosen as the fallback: the note is printed on both paths.
    (``plan``: ``status`` of an applied root shows the interpreter its manifest records.)"""
    env = {k: v for k, v in cli.env.items() if k != "KVENV_PYTHON"}
    env["PATH"] = str(cli.tmp / "empty-path")  # no python3 on PATH
    cli.forget()
    slow = cli.run("plan", cli.profile, env=env)
    fast = cli.run("plan", cli.profile, env=env)
    assert cli.taken == "quick"
    assert fast == slow and "note: no host interpreter found" in fast[2]
    env["KVENV_ROOT"] = str(cli.tmp / "nothing-applied")  # status: no recorded interpreter
    slow = cli.run("status", cli.profile, env=env)
    fast = cli.run("status", cli.profile, env=env)
    assert cli.taken == "quick"
    assert fast == slow and fast[2].count("note: no host interpreter found") == 1


def test_edited_lock_takes_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    before = cli.current_generation()
    with cli.project.lock_path.open("a") as handle:
        handle.write("\n")
    code, out, _ = cli.run("apply", cli.profile)
    assert (code, cli.taken) == (0, "full")
    assert out.startswith("applied") and cli.current_generation() != before
    code, out, _ = cli.run("status", cli.profile)
    assert cli.taken == "full" and "current: yes" in out


def test_edited_profile_takes_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    cli.run("status", cli.profile)
    path = cli.project.profile_path
    path.write_text(path.read_text().replace("[runtime.env]\n", '[runtime.env]\nX = "1"\n'))
    code, out, _ = cli.run("status", cli.profile)
    assert cli.taken == "full" and "current: no" in out
    code, out, _ = cli.run("apply", cli.profile)
    assert (code, cli.taken) == (0, "full") and out.startswith("applied")


@pytest.mark.parametrize("damage", ["manifest", "shims", "extra generation", "pointer"])
def test_damaged_state_takes_the_full_path(cli: Cli, damage: str) -> None:
    _quick_noop(cli)
    root = cli.tmp / "root"
    generation = cli.current_generation()
    if damage == "manifest":
        manifest = root / "generations" / generation / "manifest.json"
        manifest.write_text(manifest.read_text().replace('"schema"', ' "schema"', 1))
    elif damage == "shims":
        with (root / "activate.sh").open("a") as handle:
            handle.write("# edited\n")
    elif damage == "extra generation":
        (root / "generations" / "20200101T000000-abcdef").mkdir()
    else:
        (root / "current.json").write_text("{")
    slow_expected = None
    if damage == "pointer":  # the full path's verdict on a damaged pointer, recorded nowhere
        cli.forget()
        slow_expected = cli.run("apply", cli.profile)
        assert cli.taken == "full"
        (root / "current.json").write_text("{")
    code, out, err = cli.run("apply", cli.profile)
    assert cli.taken == "full"
    if slow_expected is not None:
        assert (code, out, err) == slow_expected and code != 0
    else:
        assert code == 0, out  # rebuilt, or repaired in place (shims, a leftover directory)


def test_apply_in_progress_and_other_owner_take_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    root = cli.tmp / "root"
    sidecar = root / ".kvenv.lock.owner"
    sidecar.write_text("{}")
    cli.run("apply", cli.profile)
    assert cli.taken == "full"
    sidecar.unlink(missing_ok=True)  # the full apply removed it when it released the lock
    _quick_noop(cli)
    marker = root / ".kvenv-root"
    data = json.loads(marker.read_text())
    data["owner"] = {"name": "someone-else", "file": None}
    marker.write_text(json.dumps(data))
    code, _, err = cli.run("apply", cli.profile)
    assert cli.taken == "full" and code != 0 and "someone-else" in err
    cli.run("status", cli.profile)
    assert cli.taken == "full"


def test_host_package_installed_or_removed_takes_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    dist = cli.extra / "newpkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: newpkg\nVersion: 1.0\n")
    cli.run("apply", cli.profile)
    assert cli.taken == "full"
    _quick_noop(cli)  # recorded again for the new host
    shutil.rmtree(dist)
    cli.run("apply", cli.profile)
    assert cli.taken == "full"


def test_host_environment_and_interpreter_changes_take_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    cli.run("apply", cli.profile, env=dict(cli.env, CUDA_VISIBLE_DEVICES="0"))
    assert cli.taken == "full"  # a variable the probe reads
    other = cli.tmp / "other-python"
    other.symlink_to(sys.executable)
    code, _, _ = cli.run("apply", cli.profile, "--python", str(other))
    assert cli.taken == "full" and code == 0


def test_verbose_and_json_take_the_full_path(cli: Cli) -> None:
    _quick_noop(cli)
    code, out, _ = cli.run("apply", cli.profile, "--json")
    assert (code, cli.taken) == (0, "full") and json.loads(out)["status"] == "up-to-date"
    code, _, err = cli.run("apply", "--verbose", cli.profile)
    assert (code, cli.taken) == (0, "full") and "runtime root:" in err


@pytest.fixture
def bundled(cli: Cli) -> Path:
    bundle = cli.tmp / "bundle"
    code, out, err = cli.run("bundle", cli.profile, "-o", str(bundle))
    assert code == 0, (out, err)
    cli.env["KVENV_ROOT"] = str(cli.tmp / "root-bundle")  # the bundle's profile is another file
    return bundle


def test_noop_apply_from_a_bundle_recalled(cli: Cli, bundled: Path) -> None:
    argv = ("apply", "--offline", "--from", str(bundled))
    code, out, err = cli.run(*argv)  # applies the bundle's profile
    assert code == 0, (out, err)
    code, out, err = cli.both(*argv)
    assert code == 0 and out.startswith("already up to date") and err == ""


@pytest.mark.parametrize("how", ["wheel byte", "wheel replaced", "sums"])
def test_tampered_bundle_is_still_caught(cli: Cli, bundled: Path, how: str) -> None:
    """The bundle check moved (recalled by its files' identity), it did not go: any file
    changed since it was verified makes apply verify it again, which fails as before."""
    argv = ("apply", "--offline", "--from", str(bundled))
    cli.run(*argv)
    cli.run(*argv)
    cli.run(*argv)
    assert cli.taken == "quick"
    wheel = next((bundled / "wheels").glob("*.whl"))
    if how == "wheel byte":
        with wheel.open("r+b") as handle:
            handle.seek(40)
            byte = handle.read(1)
            handle.seek(40)
            handle.write(bytes([byte[0] ^ 1]))
    elif how == "wheel replaced":
        data = bytearray(wheel.read_bytes())
        data[-30] ^= 1
        wheel.unlink()
        wheel.write_bytes(bytes(data))
    else:
        sums = bundled / "SHA256SUMS"
        sums.write_text(sums.read_text().replace("a", "b", 1))
    tampered = cli.run(*argv)
    assert cli.taken == "full" and tampered[0] != 0
    cli.forget()
    assert cli.run(*argv) == tampered  # what the full path says without any record


def test_another_interpreter_as_the_host_is_recalled_and_watched(cli: Cli) -> None:
    """The host a separate venv (kvenv installed as a CLI tool): its facts come from the
    interpreter memo, its distributions from its own site-packages, watched the same way."""
    import venv

    home = cli.tmp / "host-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(home)
    cli.env["KVENV_PYTHON"] = str(home / "bin" / "python")
    code, out, err = cli.run("apply", cli.profile)  # rebuilt for this interpreter
    assert code == 0, (out, err)
    cli.run("apply", cli.profile)  # its interpreter facts are memoized from now on
    code, out, _ = cli.both("apply", cli.profile)
    assert code == 0 and out.startswith("already up to date")
    (site,) = home.glob("lib/python*/site-packages")
    dist = site / "zz_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-pkg\nVersion: 1.0\n")
    assert cli.run("apply", cli.profile)[0] == 0
    assert cli.taken == "full"
