"""The exit-code table of docs/errors.md is complete and true: every command of the parser has
a row, and for every code a row lists there is a case here that ends with it (and every case
here is listed). The README's summary table names the same codes."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from kvenv.cli import build_parser, main
from kvenv.env.manifest import Manifest
from tests.fake_vllm.checkpoints import make_tp_checkpoint
from tests.support.applyenv import Project, local_project
from tests.support.clienv import isolated_cli_dir
from tests.support.damage import damage_in_place, damaged_bundle
from tests.support.paths import REPO
from tests.support.wheels import build_wheel

DOC = REPO / "docs" / "errors.md"
KAGGLE = "kaggle-t4x2-cu128"
KAGGLE_HOST = str(REPO / "profiles" / f"{KAGGLE}.host.json")
CODES = ("0", "1", "2", "3", "other")


def _free_port() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def documented() -> dict[str, set[str]]:
    """command -> the codes its row of the "Every command" table lists."""
    text = DOC.read_text()
    section = text.split("## Every command", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith("`"):
            continue
        codes = {code for code, cell in zip(CODES, cells[1:], strict=True) if cell != "—"}
        for command in re.findall(r"`([^`]+)`", cells[0]):
            rows[command] = codes
    return rows


def parser_commands() -> set[str]:
    """Every command, and every verb of a command that has verbs (``cache verify``)."""
    found: set[str] = set()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                verbs = [a for a in child._actions if isinstance(a, argparse._SubParsersAction)]
                if verbs:
                    found.update(f"{name} {verb}" for verb in verbs[0].choices)
                else:
                    found.add(name)
    return found


@attrs.define
class World:
    """A working directory with a broken profile, a local project (applied on demand) and
    kvenv's state under it."""

    dir: Path
    _project: Project | None = None
    applied: bool = False

    @property
    def project(self) -> Project:
        if self._project is None:
            self._project = local_project(self.dir / "proj")
        return self._project

    @property
    def profile(self) -> str:
        return str(self.project.profile_path)

    def paths(self) -> list[str]:
        return ["--root", str(self.dir / "root"), "--cache", str(self.dir / "cache")]

    def apply(self) -> str:
        if not self.applied:
            assert main(["apply", self.profile, *self.paths()]) == 0
            self.applied = True
        return self.profile

    def kvenv(self, *argv: str) -> int:
        return main(list(argv))

    def process(self, *argv: str) -> int:
        """kvenv in a process of its own (for commands that replace the process)."""
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-m", "kvenv", *argv], cwd=self.dir, env=env, capture_output=True
        )
        return done.returncode

    def wheel(self) -> Path:
        path = build_wheel(self.dir / "wheels-x", "sound", "1.0")
        return path

    def overlay_file(self) -> Path:
        from kvenv.env.root import current_state
        from kvenv.model.locations import Locations

        self.apply()
        _, manifest = current_state(Locations(self.dir / "root", self.dir / "cache"))
        assert manifest is not None
        return next(Path(manifest.dirs.overlay).glob("helper/__init__.py"))


def _tamper(path: Path) -> None:
    os.chmod(path, 0o644)
    path.write_text(path.read_text() + "# changed\n")


def _two_generations(w: World) -> Manifest:
    """Apply twice (the second with another [runtime.env]); the first generation's manifest."""
    from kvenv.env.root import current_state
    from kvenv.model.locations import Locations

    w.apply()
    _, first = current_state(Locations(w.dir / "root", w.dir / "cache"))
    assert first is not None
    profile = w.project.profile_path
    profile.write_text(profile.read_text().replace("[runtime.env]\n", '[runtime.env]\nX = "1"\n'))
    assert main(["apply", w.profile, *w.paths()]) == 0
    return first


def _pin_conflict(w: World) -> int:
    """A native wheel whose requirement no version satisfies: the relock finds no resolution."""
    wheels = w.project.dir / "wheels"
    wheel = build_wheel(wheels, "nativepkg", "9.0", requires=["helper>=99"])
    flags = ["--no-index", "--find-links", str(wheels), "--offline"]
    return w.kvenv("pin", str(wheel), "--profile", w.profile, *flags)


def _rollback_refused(w: World) -> int:
    import shutil

    first = _two_generations(w)
    shutil.rmtree(first.dirs.overlay)
    return w.kvenv("rollback", w.profile, first.generation, *w.paths())


def _rollback_busy(w: World) -> int:
    from kvenv.env.root import RootLock
    from kvenv.model.locations import Locations

    first = _two_generations(w)
    where = Locations(w.dir / "root", w.dir / "cache")
    with RootLock(where, wait=False, on_wait=print):
        return w.kvenv("rollback", w.profile, first.generation, *w.paths(), "--no-wait")


def _lock_conflict(w: World) -> int:
    from tests.support.lockenv import basic_house, write_project

    house = basic_house(w.dir / "house")
    loaded = write_project(w.dir / "lockproj", native_requires=["alpha>=99"])
    return w.kvenv("lock", str(loaded.path), "--find-links", str(house), "--no-index")


def _lockproj(w: World) -> tuple[str, list[str]]:
    """A lock project of its own (its profile path) and the flags that find its wheels."""
    from tests.support.lockenv import basic_house, write_project

    house = w.dir / "house"
    if not house.is_dir():
        basic_house(house)
    path = w.dir / "lockproj" / "profiles" / "testbox.toml"
    if not path.is_file():
        write_project(w.dir / "lockproj")
    return str(path), ["--find-links", str(house), "--no-index"]


def _add(w: World, *requirements: str, lock: bool = False) -> int:
    profile, flags = _lockproj(w)
    return w.kvenv("add", *requirements, "--profile", profile, *(flags if lock else ["--no-lock"]))


def _remove_added(w: World) -> int:
    assert _add(w, "beta") == 0
    profile, _ = _lockproj(w)
    return w.kvenv("remove", "beta", "--profile", profile, "--no-lock")


def _lock_stale(w: World) -> int:
    profile = w.project.profile_path
    profile.write_text(profile.read_text().replace('name = "t"', 'name = "t"\ndescription = "x"'))
    return w.kvenv("lock", "--check", w.profile)


def _bundle_damaged(w: World) -> int:
    return w.kvenv("bundle", "--verify", str(damaged_bundle(w.project, w.dir)))


def _cache_damaged(w: World) -> int:
    w.apply()
    damage_in_place(next((w.dir / "cache").glob("artifacts-v1/sha256/*/*/helper-*.whl")))
    return w.kvenv("cache", "verify", w.profile, "--cache", str(w.dir / "cache"))


Case = Callable[[World], int]
BAD = "--no-such-flag"
CASES: dict[tuple[str, str], Case] = {
    ("profiles", "0"): lambda w: w.kvenv("profiles"),
    ("profiles", "2"): lambda w: w.kvenv("profiles", BAD),
    ("show", "0"): lambda w: w.kvenv("show", "demo"),
    ("show", "2"): lambda w: w.kvenv("show", "broken"),
    ("validate", "0"): lambda w: w.kvenv("validate", "demo"),
    ("validate", "1"): lambda w: w.kvenv("validate", "broken"),
    ("validate", "2"): lambda w: w.kvenv("validate", "nope"),
    ("schema", "0"): lambda w: w.kvenv("schema", "profile"),
    ("schema", "2"): lambda w: w.kvenv("schema", "nope"),
    ("lock", "0"): lambda w: w.kvenv("lock", "--check", "demo"),
    ("lock", "1"): _lock_stale,
    ("lock", "2"): lambda w: w.kvenv("lock", "--check", "demo", "-o", "none.toml"),
    ("lock", "3"): _lock_conflict,
    ("add", "0"): lambda w: _add(w, "beta"),
    ("add", "2"): lambda w: w.kvenv("add", "rich", "--profile", "demo", "--no-lock"),
    ("add", "3"): lambda w: _add(w, "alpha>=99", lock=True),
    ("remove", "0"): _remove_added,
    ("remove", "2"): lambda w: w.kvenv("remove", "beta", "--profile", _lockproj(w)[0]),
    ("diff", "0"): lambda w: w.kvenv("diff", *[str(REPO / "locks" / "pylock.demo.toml")] * 2),
    ("diff", "2"): lambda w: w.kvenv("diff", "none.toml", "none.toml"),
    ("plan", "0"): lambda w: w.kvenv("plan", w.profile, *w.paths()),
    ("plan", "2"): lambda w: w.kvenv("plan", "nope"),
    ("plan", "3"): lambda w: w.kvenv("plan", KAGGLE, *w.paths()),
    ("apply", "0"): lambda w: w.kvenv("apply", w.profile, *w.paths()),
    ("apply", "2"): lambda w: w.kvenv("apply", "broken", *w.paths()),
    ("apply", "3"): lambda w: w.kvenv("apply", KAGGLE, *w.paths()),
    ("bootstrap", "0"): lambda w: w.kvenv("bootstrap", w.profile, *w.paths()),
    ("bootstrap", "2"): lambda w: w.kvenv("bootstrap", "nope"),
    ("bootstrap", "3"): lambda w: w.kvenv("bootstrap", KAGGLE, *w.paths()),
    ("activate", "0"): lambda w: w.kvenv("activate", w.apply(), *w.paths()),
    ("activate", "2"): lambda w: w.kvenv("activate", w.profile, *w.paths()),
    ("env", "0"): lambda w: w.kvenv("env", w.apply(), "--shell", "json", *w.paths()),
    ("env", "2"): lambda w: w.kvenv("env", "--manifest", "none.json"),
    ("deactivate", "0"): lambda w: w.kvenv("deactivate", "--shell", "bash"),
    ("deactivate", "2"): lambda w: w.kvenv("deactivate", "--shell", "tcsh"),
    ("status", "0"): lambda w: w.kvenv("status", w.profile, *w.paths()),
    ("status", "2"): lambda w: w.kvenv("status", "nope"),
    ("verify", "0"): lambda w: w.kvenv("verify", w.apply(), *w.paths()),
    ("verify", "1"): lambda w: (
        _tamper(w.overlay_file()) or w.kvenv("verify", w.profile, *w.paths())
    ),
    ("verify", "2"): lambda w: w.kvenv("verify", w.profile, *w.paths()),
    ("reset", "0"): lambda w: w.kvenv("reset", w.profile, "--dry-run", *w.paths()),
    ("reset", "2"): lambda w: w.kvenv("reset", w.profile, *w.paths()),
    ("fingerprint", "0"): lambda w: w.kvenv("fingerprint", "--json"),
    ("fingerprint", "2"): lambda w: w.kvenv("fingerprint", "--python", "/nonexistent/python"),
    ("init", "0"): lambda w: w.kvenv("init", "fresh", "--dir", str(w.dir)),
    ("init", "2"): lambda w: w.kvenv("init", "broken", "--dir", str(w.dir)),
    ("doctor", "0"): lambda w: w.kvenv("doctor", "demo"),
    ("doctor", "1"): lambda w: w.kvenv("doctor", KAGGLE),
    ("doctor", "2"): lambda w: w.kvenv("doctor", "demo", "--host", "none.json"),
    ("verify-gpus", "0"): lambda w: w.kvenv(
        "verify-gpus", "--tensor-parallel-size", "2", "--host", KAGGLE_HOST
    ),
    ("verify-gpus", "1"): lambda w: w.kvenv(
        "verify-gpus", "--tensor-parallel-size", "4", "--host", KAGGLE_HOST
    ),
    ("verify-gpus", "2"): lambda w: w.kvenv("verify-gpus", "--host", KAGGLE_HOST),
    ("verify-wheel", "0"): lambda w: w.kvenv("verify-wheel", str(w.wheel())),
    ("verify-wheel", "1"): lambda w: w.kvenv("verify-wheel", str(w.wheel()), "--sha256", "0" * 64),
    ("verify-wheel", "2"): lambda w: w.kvenv("verify-wheel", str(w.wheel()), "--sha256", "xyz"),
    ("stage-wheel", "0"): lambda w: w.kvenv(
        "stage-wheel", str(w.wheel()), "--target", str(w.dir / "st")
    ),
    ("stage-wheel", "2"): lambda w: w.kvenv("stage-wheel", str(w.wheel()), "--target", str(w.dir)),
    ("inspect-shards", "0"): lambda w: w.kvenv(
        "inspect-shards", str(make_tp_checkpoint(w.dir / "c", 1))
    ),
    ("inspect-shards", "1"): lambda w: w.kvenv(
        "inspect-shards", str(make_tp_checkpoint(w.dir / "c", 2)), "--tensor-parallel-size", "1"
    ),
    ("inspect-shards", "2"): lambda w: w.kvenv("inspect-shards", str(w.dir / "none")),
    ("serve", "0"): lambda w: w.kvenv(
        "serve",
        "m",
        "--dry-run",
        "--no-gpu-check",
        "--vllm",
        sys.executable,
        "--port",
        _free_port(),
    ),
    ("serve", "2"): lambda w: w.kvenv("serve", "m", "--dry-run", "--host", "0.0.0.0"),
    ("bundle", "0"): lambda w: w.kvenv(
        "bundle", w.profile, "-o", str(w.dir / "b0"), "--cache", str(w.dir / "cache")
    ),
    ("bundle", "1"): _bundle_damaged,
    ("bundle", "2"): lambda w: w.kvenv("bundle", w.profile),
    ("cache verify", "0"): lambda w: w.kvenv(
        "cache", "verify", w.apply(), "--cache", str(w.dir / "cache")
    ),
    ("cache verify", "1"): _cache_damaged,
    ("cache verify", "2"): lambda w: w.kvenv("cache", "verify", "nope"),
    ("cache prune", "0"): lambda w: w.kvenv(
        "cache", "prune", w.profile, "--cache", str(w.dir / "cache")
    ),
    ("cache prune", "2"): lambda w: w.kvenv("cache", "prune", "nope"),
    ("cache clean", "0"): lambda w: w.kvenv(
        "cache", "clean", w.profile, "--dry-run", "--cache", str(w.dir / "cache")
    ),
    ("cache clean", "2"): lambda w: w.kvenv("cache", "clean", "broken"),
    ("run", "other"): lambda w: (
        w.process("run", w.apply(), *w.paths(), "--", sys.executable, "-c", "raise SystemExit(7)")
        - 7
    ),
    ("run", "2"): lambda w: w.kvenv("run", w.profile, *w.paths(), "--", "true"),
    ("shell", "2"): lambda w: w.kvenv("shell", w.profile, *w.paths()),
    ("list", "0"): lambda w: w.kvenv("list", w.apply(), *w.paths()),
    ("list", "2"): lambda w: w.kvenv("list", w.profile, *w.paths()),
    ("generations", "0"): lambda w: w.kvenv("generations", w.profile, *w.paths()),
    ("generations", "2"): lambda w: w.kvenv("generations", "nope"),
    ("rollback", "0"): lambda w: w.kvenv(
        "rollback", w.profile, _two_generations(w).generation, *w.paths()
    ),
    ("rollback", "1"): _rollback_refused,
    ("rollback", "2"): lambda w: w.kvenv("rollback", w.profile, "not-a-generation", *w.paths()),
    ("rollback", "3"): _rollback_busy,
    ("pin", "0"): lambda w: w.kvenv(
        "pin", str(w.project.native), "--profile", w.profile, "--no-lock"
    ),
    ("pin", "2"): lambda w: w.kvenv("pin", str(w.dir / "nope.whl"), "--profile", w.profile),
    ("pin", "3"): _pin_conflict,
    ("why", "0"): lambda w: w.kvenv("why", "helper", "--profile", w.profile),
    ("why", "2"): lambda w: w.kvenv("why", "nope", "--profile", w.profile),
    ("tree", "0"): lambda w: w.kvenv("tree", "--profile", w.profile),
    ("tree", "2"): lambda w: w.kvenv("tree", "--profile", w.profile, "--invert", "nope"),
    ("export", "0"): lambda w: w.kvenv(
        "export", "--profile", w.profile, "--format", "requirements-txt", "--offline"
    ),
    ("export", "2"): lambda w: w.kvenv(
        "export", "--profile", w.profile, "--format", "pylock", "-o", str(w.dir / "x.toml")
    ),
    ("completion", "0"): lambda w: w.kvenv("completion", "bash"),
    ("completion", "2"): lambda w: w.kvenv("completion"),
}
# Codes the table lists that this suite cannot produce here, and why.
NOT_RUN: dict[tuple[str, str], str] = {
    ("serve", "other"): "vLLM's own exit status: needs vLLM (tests/unit/runtime runs the fake one)",
    ("shell", "other"): "the user's interactive shell (tests of `kvenv shell` run real shells)",
}
for _verb in ("status", "plan", "apply", "verify"):
    for _code in ("0", "1", "3"):
        NOT_RUN[(f"cluster {_verb}", _code)] = "needs a Ray cluster (-m ray)"
    CASES[(f"cluster {_verb}", "2")] = lambda w, v=_verb: w.kvenv("cluster", v, BAD)


def _expected(pair: tuple[str, str]) -> int:
    return 0 if pair[1] == "other" else int(pair[1])


def test_the_table_names_every_command_and_only_commands() -> None:
    rows = documented()
    assert set(rows) == parser_commands()


def test_every_listed_code_has_a_case_and_every_case_is_listed() -> None:
    listed = {(command, code) for command, codes in documented().items() for code in codes}
    assert listed - set(CASES) - set(NOT_RUN) == set()
    assert set(CASES) - listed == set()
    assert set(NOT_RUN) <= listed


@pytest.mark.parametrize("pair", sorted(CASES), ids=lambda p: f"{p[0]}={p[1]}")
def test_each_listed_code_is_what_the_command_returns(
    pair: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = CASES[pair](World(isolated_cli_dir(tmp_path, monkeypatch)))
    captured = capsys.readouterr()
    assert code == _expected(pair), captured.out + captured.err
    assert "Traceback" not in captured.err


def test_the_readme_summary_names_the_same_codes() -> None:
    readme = (REPO / "README.md").read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    summary = DOC.read_text().split("## The codes", 1)[1].split("\n## ", 1)[0]

    def codes(text: str) -> set[str]:
        return set(re.findall(r"^\| (\d+) \|", text, flags=re.MULTILINE))

    assert codes(readme) == codes(summary) == {"0", "1", "2", "3", "130", "141"}
