"""A warm ``kvenv apply`` into a new root, recalled (kvenv.env.recall): the same generation, file
for file and byte for byte, the same activation scripts and the same output as the full path
(with the root and the generation's id of its own); anything the full path reads that changed,
a store entry that no longer matches its seal, a root that exists, or a tampered recipe makes
it take the full path, which decides (and repairs) as before.

Each command runs as a real process through the wrapper of ``test_quick_paths`` (it reports
whether the full path's modules were imported)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.applyenv import local_project
from tests.unit.cli.test_quick_paths import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A project applied once into ``root`` by the full path (which records the recipe)."""
    runner = Cli(tmp_path, local_project(tmp_path / "proj"))
    code, out, err = runner.run("apply", runner.profile)
    assert (code, runner.taken) == (0, "full"), (out, err)
    return runner


def _into(cli: Cli, name: str, **extra: str) -> tuple[int, str, str]:
    env = dict(cli.env, KVENV_ROOT=str(cli.tmp / name), **extra)
    return cli.run("apply", cli.profile, env=env)


def _generation(root: Path) -> str:
    return str(json.loads((root / "current.json").read_text())["generation"])


def _normal(text: str, root: Path) -> str:
    return text.replace(str(root), "ROOT").replace(_generation(root), "GEN")


def _tree(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every file and directory of the root: kind, mode and (files) the sha256 of its bytes;
    the manifest's, the marker's and the pointer's with the root, generation and times made
    neutral."""
    out: dict[str, tuple[str, int, str]] = {}
    for path in sorted(root.rglob("*")):
        rel = _normal(str(path.relative_to(root)), root)
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            out[rel] = ("dir", stat.S_IMODE(info.st_mode), "")
            continue
        data = path.read_bytes()
        if path.name in ("manifest.json", ".kvenv-root"):
            document = json.loads(data)
            document["created_at"] = "TIME"
            data = _normal(json.dumps(document), root).encode()
        elif path.name in ("current.json", ".kvenv.lock.owner"):
            data = b"(differs by nature)"
        else:
            data = _normal(data.decode("utf-8", "surrogateescape"), root).encode(
                "utf-8", "surrogateescape"
            )
        out[rel] = ("file", stat.S_IMODE(info.st_mode), hashlib.sha256(data).hexdigest())
    return out


def test_a_new_root_is_recalled_file_for_file(cli: Cli) -> None:
    recalled = _into(cli, "root2")
    assert cli.taken == "quick", recalled
    cli.forget()  # the full path, for the same new-root apply
    full = _into(cli, "root3")
    assert cli.taken == "full"
    root2, root3 = cli.tmp / "root2", cli.tmp / "root3"
    assert recalled[0] == full[0] == 0
    assert _normal(recalled[1], root2) == _normal(full[1], root3)
    assert recalled[2] == full[2]
    assert _tree(root2) == _tree(root3)
    # the recalled root is an ordinary one: status, verify, a no-op apply, activate
    env = dict(cli.env, KVENV_ROOT=str(root2))
    for argv in (("status",), ("verify",), ("apply",)):
        code, out, err = cli.run(*argv, cli.profile, env=env)
        assert code == 0, (argv, out, err)
    assert "already up to date" in out
    code, out, _ = cli.run("activate", cli.profile, env=env)
    assert code == 0 and _generation(root2) in out


def _edit_lock(cli: Cli) -> None:
    with cli.project.lock_path.open("a") as handle:
        handle.write("\n")


def _set_keep(cli: Cli) -> dict[str, str]:
    return {"KVENV_KEEP_GENERATIONS": "3"}


@pytest.mark.parametrize("change", ["lock", "environment", "root exists", "cached wheel"])
def test_a_change_takes_the_full_path(cli: Cli, change: str) -> None:
    extra: dict[str, str] = {}
    if change == "lock":
        _edit_lock(cli)
    elif change == "environment":
        extra = _set_keep(cli)
    elif change == "root exists":
        (cli.tmp / "root2").mkdir()
    else:
        wheel = next((cli.tmp / "cache").glob("artifacts-v1/sha256/*/*/*.whl"))
        os.utime(wheel, ns=(1, 1))
    code, out, err = _into(cli, "root2", **extra)
    assert (code, cli.taken) == (0, "full"), (out, err)
    assert out.startswith("applied")


def test_a_hard_link_to_a_cached_wheel_is_no_change(cli: Cli) -> None:
    """The cache's own check trusts a wheel's inode, size and mtime, not its ctime (which a
    hard link to it changes, e.g. ``cp -al`` of the cache): the recall still holds."""
    wheel = next((cli.tmp / "cache").glob("artifacts-v1/sha256/*/*/*.whl"))
    os.link(wheel, cli.tmp / "linked.whl")
    code, out, err = _into(cli, "root2")
    assert (code, cli.taken) == (0, "quick"), (out, err)


def test_a_store_entry_changed_in_place_is_repaired_by_the_full_path(cli: Cli) -> None:
    """The recall checks every store entry against its seal first: an edit through the first
    root's hard link is seen, nothing is recalled, and the full path unpacks the entry again."""
    first = cli.tmp / "root"
    installed = next(first.glob("generations/*/overlay/helper/__init__.py"))
    original = installed.read_text()
    mode = stat.S_IMODE(installed.stat().st_mode)
    os.chmod(installed, mode | stat.S_IWUSR)
    installed.write_text("V = 'planted'\n")  # the store's file too: a hard link
    os.chmod(installed, mode)
    code, out, err = _into(cli, "root2")
    assert (code, cli.taken) == (0, "full"), (out, err)
    assert "damaged" in err
    fresh = next((cli.tmp / "root2").glob("generations/*/overlay/helper/__init__.py"))
    assert fresh.read_text() == original


def _recipe_file(cli: Cli) -> Path:
    for path in (cli.tmp / "cache" / "memo-v1" / "generation").glob("*.json"):
        return path
    raise AssertionError("no recipe recorded")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r["links"][0].__setitem__(2, "../../../escaped/"),  # out of the generation
        lambda r: r["links"][0].__setitem__(0, "0" * 64),  # an entry the recipe does not name
        lambda r: r["scripts"].append(["bin/x", "/etc/passwd", 493]),  # an absolute source
        lambda r: r["manifest"]["activation"]["path"].append("/usr/evil/bin"),  # off the root
        lambda r: r.__setitem__("format", 99),
        # a RECORD "written" over a file that is linked (a hard link into the store)
        lambda r: r["records"].append(
            [r["links"][0][2] + r["links"][0][3].split("\n")[0], "planted\n"]
        ),
    ],
)
def test_a_tampered_recipe_is_refused(cli: Cli, tamper: object) -> None:
    """A recipe is read like any input: a path that leaves the generation or the store, an
    entry it does not name, a manifest the start-up paths would refuse, another format: the
    full path runs, and nothing was written outside the new root."""
    path = _recipe_file(cli)
    record = json.loads(path.read_text())
    assert callable(tamper)
    tamper(record["value"])
    path.write_text(json.dumps(record))
    code, out, err = _into(cli, "root2")
    assert (code, cli.taken) == (0, "full"), (out, err)
    assert not (cli.tmp / "escaped").exists()
    from kvenv.env.seal import seal_problem

    store = cli.tmp / "cache" / "store"
    assert all(seal_problem(e) is None for e in store.iterdir() if len(e.name) == 64)
    assert sorted(p.name for p in cli.tmp.iterdir() if p.name.startswith("root")) == [
        "root",
        "root2",
    ]


def test_an_apply_from_a_bundle_is_recalled_into_a_new_root(cli: Cli) -> None:
    """``apply --offline --from BUNDLE`` (the bundle verified by its seals, nothing fetched):
    recorded by the full path in one new root, recalled in the next."""
    bundle = cli.tmp / "bundle"
    code, out, err = cli.run("bundle", cli.profile, "-o", str(bundle))
    assert code == 0, (out, err)
    argv = ("apply", "--offline", "--from", str(bundle))
    cli.forget()
    code, out, err = cli.run(*argv, env=dict(cli.env, KVENV_ROOT=str(cli.tmp / "b1")))
    assert (code, cli.taken) == (0, "full"), (out, err)
    recalled = cli.run(*argv, env=dict(cli.env, KVENV_ROOT=str(cli.tmp / "b2")))
    assert cli.taken == "quick", recalled
    assert _normal(recalled[1], cli.tmp / "b2") == _normal(out, cli.tmp / "b1")
    assert recalled[2] == err
    assert _tree(cli.tmp / "b2") == _tree(cli.tmp / "b1")
    # a file of the bundle changed: the full path (which verifies the bundle) decides
    wheel = next((bundle / "wheels").glob("*.whl"))
    os.utime(wheel, ns=(1, 1))
    code, out, err = cli.run(*argv, env=dict(cli.env, KVENV_ROOT=str(cli.tmp / "b3")))
    assert cli.taken == "full"


POINTS = ["fetch", "verify", "install-native", "install-overlay", "write-manifest", "switch",
          "write-shims"]  # fmt: skip


@pytest.mark.parametrize("point", POINTS)
def test_a_recall_killed_anywhere_leaves_a_root_the_next_apply_completes(
    cli: Cli, point: str
) -> None:
    """SIGKILL at each of the full path's kill points, which the recall passes in the same
    order: the root is either without a current generation or with a whole one, and the next
    apply (the full path: the root exists) leaves it whole and verified."""
    root = cli.tmp / "root2"
    code, _, _ = _into(cli, "root2", KVENV_TEST_KILL_AT=point)
    assert code == -9, point  # killed inside the recall (the recipe holds for this key)
    assert not any(p.name.endswith(".tmp") for p in root.iterdir())
    if (root / "current.json").exists():
        generation = _generation(root)
        assert (root / "generations" / generation / "manifest.json").is_file()
    code, out, err = _into(cli, "root2")
    assert code == 0, (out, err)
    env = dict(cli.env, KVENV_ROOT=str(root))
    code, out, err = cli.run("verify", cli.profile, env=env)
    assert code == 0, (point, out, err)


def test_a_wheel_with_data_files_is_recalled(tmp_path: Path) -> None:
    """Files a wheel installs under ``data`` (``<entry>/site/../data/...`` in the link plan)
    are recalled into the generation's ``data`` like the full path links them."""
    from tests.support.applyenv import LOCAL_TARGET, helper_wheel, native_wheel, write_project
    from tests.support.wheels import build_wheel

    wheels = tmp_path / "proj" / "wheels"
    extra = build_wheel(
        wheels, "withdata", "1.0",
        files={"withdata/__init__.py": "", "withdata-1.0.data/data/share/withdata/readme.txt":
               "shared\n"},
    )  # fmt: skip
    project = write_project(
        tmp_path / "proj",
        native=native_wheel(wheels),
        overlay=[helper_wheel(wheels), extra],
        target=LOCAL_TARGET,
    )
    runner = Cli(tmp_path, project)
    code, out, err = runner.run("apply", runner.profile)
    assert (code, runner.taken) == (0, "full"), (out, err)
    recalled = _into(runner, "root2")
    assert runner.taken == "quick", recalled
    assert _tree(tmp_path / "root2") == _tree(tmp_path / "root")
    assert next((tmp_path / "root2").glob("generations/*/data/share/withdata/readme.txt")).is_file()


def test_the_recall_links_the_bytecode_too(cli: Cli) -> None:
    """The recalled generation carries the store's bytecode (kvenv.env.bytecode): the same
    sealed .pyc files, linked, and listed in the RECORD it links."""
    import sys

    pyc = f"overlay/helper/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"
    first = next((cli.tmp / "root").glob(f"generations/*/{pyc}"))
    code, out, err = _into(cli, "root2")
    assert (code, cli.taken) == (0, "quick"), (out, err)
    recalled = next((cli.tmp / "root2").glob(f"generations/*/{pyc}"))
    assert recalled.stat().st_ino == first.stat().st_ino


def test_a_changed_pyc_takes_the_full_path_which_compiles_it_again(cli: Cli) -> None:
    import sys

    pyc = f"overlay/helper/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"
    installed = next((cli.tmp / "root").glob(f"generations/*/{pyc}"))
    original = installed.read_bytes()
    mode = stat.S_IMODE(installed.stat().st_mode)
    os.chmod(installed, mode | stat.S_IWUSR)
    installed.write_bytes(original[:16] + b"planted")  # the store's file too: a hard link
    os.chmod(installed, mode)
    code, out, err = _into(cli, "root2")
    assert (code, cli.taken) == (0, "full"), (out, err)
    assert "compiled again" in err
    assert next((cli.tmp / "root2").glob(f"generations/*/{pyc}")).read_bytes() == original


def test_no_compile_is_not_recalled_from_a_generation_with_bytecode(cli: Cli) -> None:
    """``apply --no-compile`` into a new root is keyed apart from the recorded apply (it takes
    the full path) and builds a generation without a single .pyc."""
    env = dict(cli.env, KVENV_ROOT=str(cli.tmp / "root2"))
    code, out, err = cli.run("apply", cli.profile, "--no-compile", env=env)
    assert (code, cli.taken) == (0, "full"), (out, err)
    assert not list((cli.tmp / "root2").rglob("*.pyc"))
    assert list((cli.tmp / "root").rglob("*.pyc"))


def test_a_root_another_profile_filled_while_the_recall_waited_is_left_to_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recall makes the new root, then waits for its lock; meanwhile another profile's
    apply claims the root, applies and lets go. The recall must hand over to the full path
    without writing its own owner into the marker (which would let the full path take the
    root over: two profiles' applies both succeeding on one root, as a racing CI run saw)."""
    import kvenv.env.recall as recall
    from kvenv.env.root import read_owner

    (record,) = (cli.tmp / "cache" / "memo-v1" / "generation").glob("*.json")
    recipe = json.loads(record.read_text())["value"]
    child = cli.project.dir / "profiles" / "child.toml"
    child.write_text('schema = 1\nname = "child"\nextends = "t"\n')
    lock = cli.project.lock_path.read_text().replace('profile = "t"', 'profile = "child"')
    (cli.project.dir / "locks" / "pylock.child.toml").write_text(lock)
    root = cli.tmp / "raced"
    others: list[tuple[int, str, str]] = []

    class Late(recall.PathLock):  # type: ignore[misc]
        def __enter__(self) -> object:
            others.append(cli.run("apply", str(child), env=dict(cli.env, KVENV_ROOT=str(root))))
            return super().__enter__()

    monkeypatch.setattr(recall, "PathLock", Late)
    built = recall.replay(
        recipe, root, cli.tmp / "cache" / "store", python=recipe["manifest"]["python"],
        jobs=1, wait=True, on_wait=lambda _: None,
    )  # fmt: skip
    assert [code for code, _, _ in others] == [0], others
    assert built is None  # the full path decides: it refuses (another profile owns the root)
    owner = read_owner(root)
    assert owner is not None and owner.name == "child"
    monkeypatch.undo()
    code, _, err = _into(cli, "raced")
    assert code == 3 and "'child'" in err, err
