"""Places are checked, not trusted (issue 23): a root or cache inside another root, a cache, a
store or the host's installation (or containing one) is refused before anything is written; a
root reached through a symlink is its real path; prune keeps what kvenv did not make; option
values are checked as the command line is parsed; a first apply that fails leaves no claimed
root; a root that is a file is fixed where its path came from; and ``kvenv verify`` sees a file
added to a generation whatever the fast paths recorded.

Every apply here runs the CLI in process on a profile that targets this machine, so the fast
paths (the no-op recall, a generation recalled into a new root) are live and recorded."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvenv.env.root import current_state
from kvenv.model.locations import Locations
from tests.support.applyenv import Project, local_project
from tests.support.hardening import CliResult, kvenv_argv, kvenv_env, run_cli, tree_state


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON", "KVENV_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("KVENV_CACHE_DIR", raising=False)
    monkeypatch.delenv("KVENV_KEEP_GENERATIONS", raising=False)


def _cli(project: Project, command: str, root: Path | str, cache: Path, *extra: str) -> CliResult:
    return run_cli(
        [command, str(project.profile_path), "--root", str(root), "--cache", str(cache), *extra]
    )


@pytest.fixture
def applied(tmp_path: Path) -> tuple[Project, Locations]:
    """A project applied (twice: the second a recorded no-op) into ``A`` with cache ``cache``."""
    project = local_project(tmp_path / "proj")
    where = Locations(tmp_path / "A", tmp_path / "cache")
    for _ in range(2):
        result = _cli(project, "apply", where.root, where.cache)
        assert result.code == 0, result.text
    return project, where


def _generation(where: Locations) -> Path:
    manifest = current_state(where)[1]
    assert manifest is not None
    return where.generations / manifest.generation


# -- 1. misplaced roots and caches ------------------------------------------------------------

MISPLACED = (
    "inside a live generation",
    "inside another root",
    "inside the cache",
    "inside a store entry",
    "through a symlink into a generation",
    "containing the cache",
    "cache inside another root",
    "inside kvenv's own installation",
)


@pytest.mark.parametrize("case", MISPLACED)
def test_a_misplaced_root_or_cache_is_refused_before_anything_is_written(
    applied: tuple[Project, Locations], tmp_path: Path, case: str
) -> None:
    project, where = applied
    generation = _generation(where)
    root, cache = tmp_path / "new-root", where.cache
    if case == "inside a live generation":
        root = generation / "native" / "newroot2"
    elif case == "inside another root":
        root = where.root / "sub"
    elif case == "inside the cache":
        root = where.cache / "x"
    elif case == "inside a store entry":
        entry = next(p for p in where.store.iterdir() if not p.name.startswith("."))
        root = entry / "x"
    elif case == "through a symlink into a generation":
        (tmp_path / "link").symlink_to(generation / "overlay")
        root = tmp_path / "link" / "newroot"
    elif case == "containing the cache":
        cache = root / "cache"
    elif case == "cache inside another root":
        cache = where.root / "cache2"
    else:
        root = Path(sys.prefix) / "kvenv-test-root"
        assert not os.path.lexists(root)
    before = tree_state(where.root), tree_state(where.store)
    try:
        result = _cli(project, "apply", root, cache)
    finally:  # what a kvenv that does not refuse it leaves in this interpreter's prefix
        untouched = not os.path.lexists(root) or root.is_relative_to(tmp_path)
        if case == "inside kvenv's own installation" and not untouched:
            shutil.rmtree(root)
            pytest.fail(f"apply wrote {root}")
    assert result.code == 3, result.text
    assert "refusing the" in result.err and "nothing was written" in result.err, result.err
    assert "give another --" in result.err, result.err
    assert "Traceback" not in result.text
    assert not os.path.lexists(root) or (root == tmp_path / "new-root" and not root.exists())
    assert not os.path.lexists(cache) or cache == where.cache
    assert (tree_state(where.root), tree_state(where.store)) == before


@pytest.mark.parametrize(
    "command", ["status", "verify", "activate", "list", "generations", "apply"]
)
def test_a_root_reached_through_a_symlink_is_its_real_path(tmp_path: Path, command: str) -> None:
    project = local_project(tmp_path / "proj")
    real, cache = tmp_path / "real", tmp_path / "cache"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _cli(project, "apply", link, cache).code == 0
    manifest = current_state(Locations(real, cache))[1]
    assert manifest is not None and manifest.root == str(real)
    for root in (link, real, link):  # back and forth: the same root either way
        result = _cli(project, command, root, cache)
        assert result.code == 0, (root, result.text)
        assert "belongs to" not in result.text and "not /" not in result.text


@pytest.mark.parametrize(
    "prune", ["generations kept", "apply --keep", "cache prune", "cache clean"]
)
def test_prune_never_removes_what_kvenv_did_not_make(
    applied: tuple[Project, Locations], prune: str
) -> None:
    project, where = applied
    if prune.startswith("cache"):
        foreign = where.store / "not-kvenvs"  # a root an older kvenv let be placed there
        foreign.mkdir()
        (foreign / ".kvenv-root").write_text("{}")
        (foreign / "data.txt").write_text("mine\n")
        verb = prune.split()[1]
        result = run_cli(["cache", verb, str(project.profile_path), "--cache", str(where.cache)])
        assert result.code == 0, result.text
        assert (foreign / "data.txt").read_text() == "mine\n"
        if verb == "clean":  # everything of kvenv's went
            assert sorted(p.name for p in where.store.iterdir()) == ["not-kvenvs"]
            assert not (where.cache / "artifacts-v1").exists()
        return
    nested = _generation(where) / "native" / "nested-root"  # as an older kvenv allowed
    nested.mkdir()
    (nested / ".kvenv-root").write_text("{}")
    (nested / "keep.txt").write_text("mine\n")
    keep = ["--keep", "2"] if prune == "apply --keep" else []
    for _ in range(3):  # each repair makes a generation; the first is then past keeping
        result = _cli(project, "apply", where.root, where.cache, "--repair", *keep)
        assert result.code == 0, result.text
    assert (nested / "keep.txt").read_text() == "mine\n"


# -- 2. verify sees an added file, whatever the fast paths recorded -----------------------------


@pytest.mark.parametrize("added", ["overlay/sitecustomize.py", "native/x.pth", "bin/evil"])
def test_verify_sees_an_added_file_after_warm_no_ops(
    applied: tuple[Project, Locations], added: str
) -> None:
    project, where = applied
    assert _cli(project, "verify", where.root, where.cache).code == 0
    assert _cli(project, "status", where.root, where.cache).code == 0
    path = _generation(where) / added
    path.write_text("import os\n")
    for _ in range(2):  # a recorded no-op apply, status: none of them vouches for the files
        assert _cli(project, "apply", where.root, where.cache).code == 0
        assert _cli(project, "status", where.root, where.cache).code == 0
        result = _cli(project, "verify", where.root, where.cache)
        assert result.code == 1 and str(path) in result.err, result.text
    repair = _cli(project, "apply", where.root, where.cache, "--repair")
    assert repair.code == 0, repair.text
    assert not path.exists()
    assert _cli(project, "verify", where.root, where.cache).code == 0


# -- 3. option values checked at parse time; a failed first apply claims nothing ----------------

BAD_VALUES = (
    ["--jobs", "0"],
    ["--jobs", "-5"],
    ["--jobs", "257"],
    ["--keep", "1"],
    ["--keep", "0"],
    ["--root", ""],
    ["--cache", ""],
    ["--from", ""],
    ["--python", ""],
)


@pytest.mark.parametrize("root_kind", ["applied root", "new root"])
@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: " ".join(v) or "empty")
def test_a_bad_option_value_is_refused_as_it_is_parsed(
    applied: tuple[Project, Locations], tmp_path: Path, bad: list[str], root_kind: str
) -> None:
    project, where = applied
    root = where.root if root_kind == "applied root" else tmp_path / "new-root"
    before = tree_state(where.root)
    argv = ["apply", str(project.profile_path)]
    if bad[0] != "--root":
        argv += ["--root", str(root)]
    if bad[0] != "--cache":
        argv += ["--cache", str(where.cache)]
    result = run_cli([*argv, *bad])
    assert result.code == 2, result.text
    assert f"argument {bad[0]}" in result.err, result.err
    assert not (tmp_path / "new-root").exists()
    assert tree_state(where.root) == before


FAILURES = ("fetch fails", "cache under a file", "read-only cache", "existing empty root")


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_first_apply_leaves_no_claimed_root(tmp_path: Path, failure: str) -> None:
    project = local_project(tmp_path / "proj")
    root, cache = tmp_path / "root", tmp_path / "cache"
    if failure in ("fetch fails", "existing empty root"):
        project.native.unlink()  # the native wheel's path source: gone
        if failure == "existing empty root":
            root.mkdir()
    elif failure == "cache under a file":
        (tmp_path / "afile").write_text("")
        cache = tmp_path / "afile" / "cache"
    else:
        cache.mkdir()
        cache.chmod(0o555)
    if failure == "read-only cache" and os.geteuid() == 0:  # root ignores modes: a ro mount
        if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode:
            pytest.skip("root ignores permissions, and `unshare -rm` is not allowed here")
        mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        argv = ["apply", str(project.profile_path), "--root", str(root), "--cache", str(cache)]
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", mount, str(cache), *kvenv_argv(argv)],
            env=kvenv_env(),
            capture_output=True,
            text=True,
        )
        result = CliResult(done.returncode, done.stdout, done.stderr)
        assert "Read-only file system" in result.err, result.text
    else:
        result = _cli(project, "apply", root, cache)
    assert result.code != 0, result.text
    assert "Traceback" not in result.text
    if failure == "existing empty root":
        assert root.is_dir() and list(root.iterdir()) == [], "the user's directory stays, empty"
    else:
        assert not os.path.lexists(root), sorted(os.listdir(root))


# -- 4. a root that is a file -----------------------------------------------------------------


@pytest.mark.parametrize("origin", ["$KVENV_ROOT", "--root"])
@pytest.mark.parametrize("command", ["apply", "activate", "status", "verify", "reset"])
def test_a_root_that_is_a_file_is_fixed_where_it_was_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, origin: str
) -> None:
    project = local_project(tmp_path / "proj")
    afile, cache = tmp_path / "afile", tmp_path / "cache"
    afile.write_text("not a root\n")
    argv = [command, str(project.profile_path), "--cache", str(cache)]
    if command == "reset":
        argv.append("--yes")
    if origin == "--root":
        result = run_cli([*argv, "--root", str(afile)])
    else:
        monkeypatch.setenv("KVENV_ROOT", str(afile))
        result = run_cli(argv)
    assert result.code == 2, result.text
    assert f"{afile} (from {origin}) is a file" in result.err, result.err
    assert "kvenv reset" not in result.err and "choose another --root" not in result.err
    if origin == "$KVENV_ROOT":
        assert "point $KVENV_ROOT at another directory" in result.err
        assert "`unset KVENV_ROOT`" in result.err
        monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "elsewhere"))  # the fix, as printed
    else:
        assert "give another --root DIR" in result.err
        argv += ["--root", str(tmp_path / "elsewhere")]
    assert afile.read_text() == "not a root\n"
    if command in ("apply", "status", "reset"):
        assert run_cli(argv).code == 0, shlex.join(argv)
