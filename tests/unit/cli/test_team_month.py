"""A team's first month with kvenv, acted out (issue 36): a temporary git repository, a host
venv (the interpreter kvenv probes), a loopback index of small real wheels (no network).
init with ``--python``, ``pin NAME==VERSION``, declared extras, lock and commit; ``add`` on
two branches and a git merge (the merged lock equals a fresh relock); ``--upgrade-package``;
``remove``; a native bump with ``pin``; a host snapshot bump; ``lock --check`` after every
commit; a hand edit caught. At each step the printed change is asserted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

from tests.support.hardening import CliResult, run_cli
from tests.support.lockenv import isolate_index_env, serve_index
from tests.support.wheels import build_wheel

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


class Team:
    """The repository, its wheelhouse flags and the git and kvenv commands run in it."""

    def __init__(self, repo: Path, index_url: str) -> None:
        self.repo = repo
        self.flags = ["--index-url", index_url]

    def git(self, *argv: str, check: bool = True) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        done = subprocess.run(
            ["git", *argv], cwd=self.repo, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0 or not check, done.stderr + done.stdout
        return done.stdout

    def kvenv(self, *argv: str, code: int = 0) -> CliResult:
        result = run_cli(list(argv))
        assert result.code == code, f"kvenv {' '.join(argv)}\n{result.text}"
        assert "Traceback" not in result.text
        return result

    def changes(self, *argv: str) -> list[str]:
        """The change lines a locking command printed (after its `wrote:` summary)."""
        lines = self.kvenv(*argv, *self.flags).out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(("wrote:", "unchanged:")))
        return lines[start + 2 :]

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        checked = self.kvenv("lock", "team", "--check")  # the CI gate after every commit
        assert checked.out.startswith("ok: "), checked.text

    def lock(self) -> dict[str, str]:
        doc = tomllib.loads((self.repo / "locks" / "pylock.team.toml").read_text())
        return {
            p["name"]: p["version"]
            for p in doc["packages"]
            if not p.get("tool", {}).get("kvenv", {}).get("native")
        }


def _host_venv(path: Path) -> Path:
    """A real venv (no pip: nothing in it but what the test puts there): the team's host."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def _install_on_host(venv: Path, name: str, version: str) -> None:
    """The host image gains a distribution (as its maintainers' pip would leave it)."""
    purelib = sysconfig.get_path(
        "purelib", vars={"base": str(venv), "platbase": str(venv)}, scheme="venv"
    )
    info = Path(purelib) / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def test_a_team_month(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_index_env(monkeypatch, tmp_path / "cache")
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    house = tmp_path / "house"
    build_wheel(house, "teamnative", "1.0", requires=["mdurl~=0.1"])
    build_wheel(house, "teamnative", "1.1", requires=["mdurl~=0.1", "idna>=3"])
    for name, version, requires in (
        ("mdurl", "0.1.2", []),
        ("idna", "3.19", []),
        ("rich", "13.7.1", ["pygments>=2"]),
        ("rich", "13.9.4", ["pygments>=2"]),
        ("pygments", "2.18.0", []),
        ("six", "1.17.0", []),
        ("tqdm", "4.66.0", []),
        ("tqdm", "4.67.1", []),
    ):
        build_wheel(house, name, version, requires=requires)
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.chdir(repo)
    with serve_index(house) as url:  # the team's index (a loopback one: no network)
        _month(Team(repo, url))


def _month(team: Team) -> None:
    repo = team.repo
    team.git("init", "-q", "-b", "main")
    python = _host_venv(repo / "host")
    (repo / ".gitignore").write_text("host/\n")

    # day 1: a profile of this host, the native pinned from the index, declared extras
    team.kvenv("init", "team", "--from-host", "--python", "host/bin/python")
    profile = repo / "profiles" / "team.toml"
    assert tomllib.loads(profile.read_text())["host"]["python"] == "host/bin/python"
    assert python.is_file()
    pinned = team.kvenv("pin", "teamnative==1.0", "--profile", "team", *team.flags)
    assert pinned.out.splitlines()[-2:] == ["Added mdurl v0.1.2", "Added native teamnative v1.0"]
    assert team.changes("add", "rich<13.8", "--profile", "team") == [
        "Added pygments v2.18.0",
        "Added rich v13.7.1",
    ]
    team.commit("team profile: teamnative 1.0 with rich")

    # week 1: two people add a package each on their branches; the merge
    team.git("checkout", "-q", "-b", "alice")
    assert team.changes("add", "tqdm==4.66.0", "--profile", "team") == ["Added tqdm v4.66.0"]
    team.commit("add tqdm")
    team.git("checkout", "-q", "main")
    team.git("checkout", "-q", "-b", "bob")
    assert team.changes("add", "six", "--profile", "team") == ["Added six v1.17.0"]
    team.commit("add six")
    team.git("checkout", "-q", "main")
    team.git("merge", "-q", "alice")
    merged = team.git("merge", "bob", check=False)  # both appended to [overlay] requires
    assert "CONFLICT" in merged, merged
    # resolved as uv/pixi users do: take main's files, redo bob's change, relock
    team.git("checkout", "--ours", "--", "profiles/team.toml", "locks/pylock.team.toml")
    assert team.changes("add", "six", "--profile", "team") == ["Added six v1.17.0"]
    team.git("add", "-A")
    team.git("commit", "-q", "--no-edit")
    assert team.kvenv("lock", "team", "--check").out.startswith("ok: ")
    assert team.lock() == {
        "mdurl": "0.1.2",
        "pygments": "2.18.0",
        "rich": "13.7.1",
        "six": "1.17.0",
        "tqdm": "4.66.0",
    }
    fresh = repo / "locks" / "pylock.fresh.toml"
    team.kvenv("lock", "team", "--fresh", "-o", str(fresh), *team.flags)
    assert (
        tomllib.loads(fresh.read_text())["packages"]
        == (tomllib.loads((repo / "locks" / "pylock.team.toml").read_text())["packages"])
    )  # the merged lock is what a fresh relock gives
    fresh.unlink()

    # week 2: loosen tqdm, then upgrade it alone
    loosened = team.kvenv("add", "tqdm", "--profile", "team", *team.flags).out
    assert "replaced 'tqdm==4.66.0' with 'tqdm'" in loosened
    assert team.lock()["tqdm"] == "4.66.0"  # the lock's pin is kept
    assert team.changes("lock", "team", "--upgrade-package", "tqdm") == [
        "Updated tqdm v4.66.0 -> v4.67.1"
    ]
    team.commit("upgrade tqdm")

    # week 3: six goes; the native is bumped
    assert team.changes("remove", "six", "--profile", "team") == ["Removed six v1.17.0"]
    team.commit("remove six")
    bumped = team.kvenv("pin", "teamnative==1.1", "--profile", "team", *team.flags)
    assert bumped.out.splitlines()[-2:] == [
        "Added idna v3.19",
        "Native teamnative v1.0 -> v1.1",
    ], bumped.out
    team.commit("teamnative 1.1")

    # week 4: the host image is updated (it now ships tqdm 4.67.1): a reviewed change
    _install_on_host(repo / "host", "tqdm", "4.67.1")
    team.kvenv("fingerprint", "--python", "host/bin/python", "--save", "profiles/team.host.json")
    stale = team.kvenv("lock", "team", "--check", code=1)
    assert "host snapshot" in stale.text, stale.text
    assert team.changes("lock", "team") == [
        "Removed tqdm v4.67.1 (the host's v4.67.1 is used now)",
        "Host tqdm v4.67.1 relied on",
    ]
    team.commit("host image of week 4")
    assert team.lock() == {"idna": "3.19", "mdurl": "0.1.2", "pygments": "2.18.0", "rich": "13.7.1"}

    # and someone edits the lock by hand: CI catches it
    path = repo / "locks" / "pylock.team.toml"
    text = path.read_text()
    rich = next(p for p in tomllib.loads(text)["packages"] if p["name"] == "rich")
    sha = rich["wheels"][0]["hashes"]["sha256"]
    path.write_text(text.replace(sha, "0" * 64))  # "the index's hash changed, just paste it"
    edited = team.kvenv("lock", "team", "--check", code=1)
    assert "edited by hand" in edited.err and "$.packages[" in edited.err, edited.err
    assert "kvenv lock team" in edited.err
    log = team.git("log", "--oneline").splitlines()
    assert len(log) == 8, log  # 7 commits and the merge
