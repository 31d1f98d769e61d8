"""``kvenv lock --check`` and an unchanged offline ``kvenv lock`` answered from records
(kvenv.lock.quick) without loading the profile: byte for byte what the full path prints, and
never once anything the full path reads has changed."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kvenv.lock.check
import kvenv.model.loading
from kvenv._util import memo
from kvenv.cli import main
from kvenv.lock.indexflags import index_values
from kvenv.lock.quick import CHECK_KIND, RESULT_KIND, check_key, recall
from kvenv.model.facts import remember_facts
from tests.support.audit import reads_of, uncovered
from tests.support.lockenv import (
    HOST_TORCH,
    basic_house,
    isolate_index_env,
    serve_index,
    write_project,
)
from tests.support.wheels import build_wheel, sha256_of

EVIL_FILES = {"evil/__init__.py": "x = 1\n", "torch/__init__.py": "import os\n"}
Said = tuple[int, str, str]


class Loads:
    """``load_profile`` counted: how many commands took the full path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = kvenv.model.loading.load_profile

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(kvenv.model.loading, "load_profile", counted)

    def take(self) -> int:
        calls, self.calls = self.calls, 0
        return calls


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate_index_env(monkeypatch, tmp_path / "cache")
    return tmp_path / "cache"


@pytest.fixture
def project(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a parent profile, locked from a find-links house; the project dir."""
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    profile = root / "profiles" / "testbox.toml"
    (root / "profiles" / "base.toml").write_text(
        'schema = 1\nname = "base"\n[runtime]\ndtype = "float16"\n'
    )
    text = profile.read_text().replace('name = "testbox"\n', 'name = "testbox"\nextends = "base"\n')
    profile.write_text(text)
    basic_house(root / "house")
    monkeypatch.chdir(root)
    assert main(["lock", "testbox", "--find-links", "house", "--no-index"]) == 0
    return root


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Said:
    capsys.readouterr()
    code = main(argv)
    said = capsys.readouterr()
    return code, said.out, said.err


CHECKS_DIR = f"{memo.LAYOUT}/{CHECK_KIND}"
FACTS_DIR = f"{memo.LAYOUT}/profile-facts"


def _forget(cache: Path, *kinds: str) -> None:
    for kind in kinds:
        shutil.rmtree(cache / kind, ignore_errors=True)


def _kept(cache: Path, output: Path | None = None, at_hand: Path | None = None) -> Any:
    """The passed check of ``testbox`` kept in ``cache`` (run from the working directory)."""
    index = index_values(environ=os.environ, base=Path.cwd())  # no index flags given
    return recall(cache, CHECK_KIND, check_key("testbox", output, at_hand or cache, index))


CHECKS = [["lock", "testbox", "--check"], ["lock", "testbox", "--check", "--json"]]


@pytest.mark.parametrize("argv", CHECKS, ids=["text", "json"])
def test_a_passed_check_is_answered_from_its_record_byte_for_byte(
    project: Path,
    cache: Path,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loads = Loads(monkeypatch)
    full = _run(argv, capsys)
    assert full[0] == 0 and loads.take() == 1
    assert list((cache / CHECKS_DIR).glob("*.json"))
    quick = _run(argv, capsys)
    assert loads.take() == 0  # the profile was not loaded
    assert quick == full
    _forget(cache, CHECKS_DIR, FACTS_DIR)
    assert _run(argv, capsys) == full and loads.take() == 1


def _edit_profile(root: Path) -> None:
    profile = root / "profiles" / "testbox.toml"
    profile.write_text(profile.read_text().replace('glibc = "2.35"', 'glibc = "2.39"'))


def _edit_parent(root: Path) -> None:
    parent = root / "profiles" / "base.toml"
    parent.write_text(parent.read_text().replace("float16", "bfloat16"))


def _edit_lock(root: Path) -> None:
    lock = root / "locks" / "pylock.testbox.toml"
    text = lock.read_text()
    lock.write_text(text.replace('version = "2.1.0"', 'version = "2.1.1"', 1))


def _edit_snapshot(root: Path) -> None:
    snapshot = root / "profiles" / "testbox.host.json"
    data = json.loads(snapshot.read_text())
    data["distributions"].append({"name": "extra-host-pkg", "version": "1.0"})
    snapshot.write_text(json.dumps(data))


def _same_size_snapshot(root: Path) -> None:
    """The snapshot rewritten in place to other bytes of the same size, its mtime restored."""
    snapshot = root / "profiles" / "testbox.host.json"
    before = snapshot.stat()
    snapshot.write_text(snapshot.read_text().replace('"cp312"', '"cp311"', 1))
    os.utime(snapshot, ns=(before.st_atime_ns, before.st_mtime_ns))


EDITS: dict[str, Callable[[Path], None]] = {
    "profile": _edit_profile,
    "parent": _edit_parent,
    "lock": _edit_lock,
    "snapshot": _edit_snapshot,
    "snapshot, same size and mtime": _same_size_snapshot,
}


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_edit_is_noticed_with_the_record_present(
    project: Path,
    cache: Path,
    edit: str,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = CHECKS[1] if as_json else CHECKS[0]
    assert _run(argv, capsys)[0] == 0
    assert _run(argv, capsys)[0] == 0  # from the record
    EDITS[edit](project)
    loads = Loads(monkeypatch)
    with_record = _run(argv, capsys)
    assert with_record[0] != 0 and loads.take() == 1
    _forget(cache, CHECKS_DIR, FACTS_DIR)
    assert _run(argv, capsys) == with_record  # the same failure as without any record
    assert not list((cache / CHECKS_DIR).glob("*.json"))  # a failure is never recorded


def test_a_wheel_at_hand_that_ships_torch_is_caught_with_the_record_present(
    tmp_path: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kvenv._util.urls import allow_loopback_http
    from kvenv.fetch.cache import ArtifactCache

    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH], native_requires=["torch==2.10.0", "evil"])
    house = basic_house(tmp_path / "house")
    evil = build_wheel(house, "evil", "1.0", files=EVIL_FILES)
    monkeypatch.chdir(root)
    check = ["lock", "testbox", "--check"]
    loads = Loads(monkeypatch)
    with serve_index(house) as url, allow_loopback_http():
        assert main(["lock", "testbox", "--index-url", url, "--no-portable"]) == 0
        assert _run(check, capsys)[0] == 0
        loads.take()
        assert _run(check, capsys)[0] == 0 and loads.take() == 0
        entry = ArtifactCache(cache).entry(sha256_of(evil))
        entry.mkdir(parents=True)
        (entry / evil.name).write_bytes(evil.read_bytes())
        code, _, err = _run(check, capsys)
    assert code == 1 and loads.take() == 1
    assert "evil-1.0-py3-none-any.whl" in err and "'torch/'" in err


def test_a_parent_shadowed_on_the_search_path_is_noticed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(CHECKS[0], capsys)[0] == 0
    monkeypatch.setenv("KVENV_PROFILE_PATH", "")
    assert _run(CHECKS[0], capsys)[0] == 0
    loads = Loads(monkeypatch)
    assert _run(CHECKS[0], capsys)[0] == 0 and loads.take() == 0
    other = project / "elsewhere"
    other.mkdir()
    (other / "base.toml").write_text('schema = 1\nname = "base"\n[runtime]\ndtype = "float32"\n')
    parent = project / "profiles" / "base.toml"
    parent.rename(other / "gone.toml")  # the parent is now found on the search path only
    monkeypatch.setenv("KVENV_PROFILE_PATH", str(other))
    code, _, err = _run(CHECKS[0], capsys)
    assert code == 1 and loads.take() == 1 and "profile changed" in err


def test_touching_a_file_the_check_reads_makes_it_run_again(
    project: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = _run(CHECKS[0], capsys)
    loads = Loads(monkeypatch)
    assert _run(CHECKS[0], capsys) == full and loads.take() == 0
    wheel = next((project / "house").glob("alpha-*.whl"))
    data = wheel.read_bytes()
    wheel.unlink()
    wheel.write_bytes(data)  # the same bytes, another file
    assert _run(CHECKS[0], capsys) == full and loads.take() == 1
    assert _run(CHECKS[0], capsys) == full and loads.take() == 0


def test_a_damaged_record_is_a_miss(
    project: Path, cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = _run(CHECKS[0], capsys)
    for record in (cache / CHECKS_DIR).glob("*.json"):
        record.write_text('{"lock": ')
    loads = Loads(monkeypatch)
    assert _run(CHECKS[0], capsys) == full and loads.take() == 1
    for record in (cache / CHECKS_DIR).glob("*.json"):
        data = json.loads(record.read_text())
        data["value"] = "not a dict"
        record.write_text(json.dumps(data))
    assert _run(CHECKS[0], capsys) == full and loads.take() == 1


def test_a_record_holds_only_for_the_same_lock_path(
    project: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = project / "locks" / "pylock.testbox.toml"
    assert main(["lock", "testbox", "--check"]) == 0
    assert _kept(cache) is not None
    copy = project / "copy.toml"
    copy.write_bytes(lock.read_bytes())
    assert _kept(cache, output=copy) is None  # --output names another lock
    assert _kept(cache, at_hand=project) is None  # another cache
    _edit_profile(project)
    assert _kept(cache) is None  # a file of the chain changed


@pytest.mark.parametrize("edit", ["lock", "snapshot", "profile"])
def test_a_file_edited_while_the_check_runs_is_not_recorded_as_passed(
    project: Path, edit: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check passes for what it read; the file is edited before the verdict is recorded:
    the record must not vouch for the edited bytes."""
    real = kvenv.lock.check.check_lock
    edits = {"lock": _edit_lock, "snapshot": _edit_snapshot, "profile": _edit_profile}

    def racing(*args: Any, **kwargs: Any) -> Any:
        report = real(*args, **kwargs)
        edits[edit](project)
        return report

    monkeypatch.setattr(kvenv.lock.check, "check_lock", racing)
    assert _run(CHECKS[0], capsys)[0] == 0  # what it read passed
    monkeypatch.setattr(kvenv.lock.check, "check_lock", real)
    loads = Loads(monkeypatch)
    assert _run(CHECKS[0], capsys)[0] != 0 and loads.take() == 1


# the offline lock ----------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A project locked once online from a loopback index; the offline argv."""
    house = basic_house(tmp_path / "house")
    root = tmp_path / "p"
    write_project(root, distributions=[HOST_TORCH])
    monkeypatch.chdir(root)
    with serve_index(house) as url:
        assert main(["lock", "testbox", "--index-url", url]) == 0
    return ["lock", "testbox", "--index-url", url, "--offline"]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_unchanged_offline_lock_skips_loading_the_profile(
    offline: list[str],
    cache: Path,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*offline, "--json"] if as_json else offline
    loads = Loads(monkeypatch)
    resolved = _run(argv, capsys)
    assert resolved[0] == 0 and loads.take() == 1
    lock = Path("locks/pylock.testbox.toml")
    before = lock.read_bytes()
    quick = _run(argv, capsys)
    assert loads.take() == 0  # from the memo, the profile not loaded
    assert lock.read_bytes() == before
    _forget(cache, f"{memo.LAYOUT}/lock-result")
    kept = _run(argv, capsys)  # resolved again through the full path: the same output
    assert loads.take() == 1 and kept == quick
    assert _run(argv, capsys) == quick and loads.take() == 0


@pytest.mark.parametrize("edit", ["profile", "comment", "snapshot", "lock"])
def test_an_offline_lock_notices_an_edit_with_the_records_present(
    offline: list[str],
    edit: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _run(offline, capsys)[0] == 0
    kept = _run(offline, capsys)
    loads = Loads(monkeypatch)
    assert _run(offline, capsys) == kept and loads.take() == 0
    root = Path.cwd()
    if edit == "profile":
        _edit_profile(root)
    elif edit == "comment":  # the same profile, other bytes
        profile = root / "profiles" / "testbox.toml"
        profile.write_text(profile.read_text() + "# edited\n")
    elif edit == "snapshot":
        _edit_snapshot(root)
    else:
        (root / "locks" / "pylock.testbox.toml").unlink()
    code, out, _ = _run(offline, capsys)
    assert code == 0 and loads.take() == 1  # the full path ran
    if edit == "comment":
        assert out.startswith("unchanged:")
    else:
        assert out.startswith("wrote:")  # resolved again, for the new inputs


def test_an_offline_lock_with_other_flags_is_another_memo(
    offline: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(offline, capsys)[0] == 0
    _run(offline, capsys)
    loads = Loads(monkeypatch)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/simple")
    code, _, _ = _run(offline, capsys)
    assert loads.take() == 1  # another index configuration: not the kept result
    assert code in (0, 2)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL")
    assert _run([*offline, "--exclude-newer", "2999-01-01"], capsys)[0] == 0
    assert loads.take() == 1  # --exclude-newer always takes the full path
    assert _run([*offline, "--exclude-newer", "not a date"], capsys)[0] == 2
    assert loads.take() == 1


def test_a_check_record_of_another_checkout_is_not_used(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same project copied elsewhere, its lock then edited: its own files are checked."""
    assert main(CHECKS[0]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    monkeypatch.chdir(copy)
    assert _run(CHECKS[0], capsys)[0] == 0
    _edit_lock(copy)
    assert _run(CHECKS[0], capsys)[0] != 0


def test_two_kvenvs_sharing_a_cache_keep_their_own_records(
    project: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passed check recorded by two kvenv installs (two code identities) sharing a cache, in
    turn: each finds its own record; a third code finds none."""
    codes = ["b" * 64, memo.code_digest()]
    for code in codes:
        monkeypatch.setattr(memo, "code_digest", lambda code=code: code)
        assert main(["lock", "testbox", "--check"]) == 0
    assert len(list((cache / CHECKS_DIR).glob("*.json"))) == 2
    for code in codes:
        monkeypatch.setattr(memo, "code_digest", lambda code=code: code)
        assert _kept(cache) is not None
    monkeypatch.setattr(memo, "code_digest", lambda: "c" * 64)
    assert _kept(cache) is None


# completeness (tests/support/audit.py) -------------------------------------------------------


def _only_record(cache: Path, kind: str) -> list[list[Any]]:
    (record,) = (cache / memo.LAYOUT / kind).glob("*.json")
    deps: list[list[Any]] = json.loads(record.read_text())["deps"]
    return deps


def test_every_file_a_check_reads_is_a_dependency_of_its_record(
    project: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The full check (profile, lock, host snapshot, wheels at hand) under the audit hook:
    each file it opened or listed is covered by the record it kept, and by nothing less."""
    _forget(cache, memo.LAYOUT)
    (code, _, _), reads = reads_of(lambda: _run(CHECKS[0], capsys))
    assert code == 0
    deps = _only_record(cache, CHECK_KIND)
    assert uncovered(reads, deps, memo_root=cache) == []
    lock = str(project / "locks" / "pylock.testbox.toml")
    assert ("open", lock) in reads
    fewer = [d for d in deps if d[:2] != ["bytes", lock]]
    assert uncovered(reads, fewer, memo_root=cache) == [("open", lock)]


def test_every_file_the_loader_reads_is_a_dependency_of_the_profile_facts(
    project: Path, cache: Path
) -> None:
    _forget(cache, memo.LAYOUT)
    loaded, reads = reads_of(lambda: kvenv.model.loading.load_profile("testbox"))
    remember_facts(loaded, "testbox")
    assert uncovered(reads, _only_record(cache, "profile-facts"), memo_root=cache) == []
    assert ("open", str(project / "profiles" / "base.toml")) in reads  # the extends chain


def test_every_file_an_offline_lock_reads_is_a_dependency_of_its_record(
    offline: list[str], cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _forget(cache, memo.LAYOUT)
    (code, _, _), reads = reads_of(lambda: _run(offline, capsys))
    assert code == 0
    missed = uncovered(reads, _only_record(cache, RESULT_KIND), memo_root=cache)
    assert missed == [], missed
