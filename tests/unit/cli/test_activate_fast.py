"""``kvenv activate`` and ``kvenv run`` on the start-up path (issue 13): with the profile's facts
record and the root's activation record (the memo kind ``activation``) present they answer
from plain data (:func:`kvenv.env.runenv.quick_activation`), and the answer (stdout, stderr,
exit code) is byte for byte the full path's; every change the full path would notice makes
the start-up path unsure, so the full path answers.

Each test runs the real CLI in process twice over the same tree: once with the start-up path
switched off (the full path: the profile loaded, the manifest structured), once as users run
it, and compares the two. A spy records whether the start-up path answered."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import kvenv.env.runenv as runenv
from kvenv._util.memo import LAYOUT
from kvenv.cli import main
from kvenv.env.root import current_manifest_path
from tests.support.applyenv import Project, apply, fake_host_site, host_snapshot, local_project
from tests.support.applyenv import locations as where_of

SHELLS = ("bash", "zsh", "sh", "fish", "pwsh", "json")
FACTS_DIR = f"{LAYOUT}/profile-facts"
RECORDS = Path("memo-v1") / "activation"  # the memo kind the start-up path answers from


class Spy:
    """Wraps the start-up path: ``answered`` says whether it gave an answer the last time;
    ``off`` makes it always unsure (the full path)."""

    def __init__(self) -> None:
        self.real = runenv.quick_activation
        self.off = False
        self.answered: bool | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.off:
            self.answered = False
            return None
        found = self.real(*args, **kwargs)
        self.answered = found is not None
        return found


@pytest.fixture
def applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Project, Path]]:
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE", "KVENV_PYTHON", "KVENV_MANIFEST"):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("_KVENV")]:
        monkeypatch.delenv(name)
    project = local_project(tmp_path / "proj")
    where = where_of(tmp_path)
    result = apply(project.loaded(), project.lock(), host_snapshot(fake_host_site(tmp_path)), where)
    assert result.status == "applied"
    monkeypatch.setenv("KVENV_ROOT", str(where.root))
    monkeypatch.setenv("KVENV_CACHE_DIR", str(where.cache))
    monkeypatch.chdir(project.dir)
    yield project, where.root


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    found = Spy()
    monkeypatch.setattr(runenv, "quick_activation", found)
    return found


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _both(spy: Spy, argv: list[str]) -> tuple[tuple[int, str, str], bool | None]:
    """The answer as users get it, then the full path's; they must be equal. Returns the
    answer and whether the start-up path gave it (the first run: records are what they were
    before; the full path may record anew)."""
    spy.off = False
    fast = _cli(argv)
    answered = spy.answered
    spy.off = True
    slow = _cli(argv)
    spy.off = False
    assert fast == slow, f"start-up path answered={answered}"
    return fast, answered


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("by", ["name", "path", "default"])
def test_the_start_up_path_prints_what_the_full_path_prints(
    applied: tuple[Project, Path], spy: Spy, shell: str, by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, root = applied
    refs = {"name": [project.name], "path": [str(project.profile_path)], "default": []}
    if by == "default":
        monkeypatch.setenv("KVENV_PROFILE", project.name)
    argv = ["activate", *refs[by], "--shell", shell]
    assert _cli(argv)[0] == 0  # the first activate records the facts and the activation
    (code, out, err), answered = _both(spy, argv)
    assert answered is True
    assert code == 0 and err == ""
    manifest = current_manifest_path(root)
    assert manifest is not None and str(manifest) in out
    if shell == "json":
        assert list(json.loads(out)) == ["prepend", "set", "pth_imports", "environment_variables"]


def test_a_first_activate_takes_the_full_path_and_records_for_the_next(
    applied: tuple[Project, Path], spy: Spy
) -> None:
    project, _ = applied
    cache = Path(os.environ["KVENV_CACHE_DIR"])
    argv = ["activate", project.name, "--shell", "bash"]
    first = _cli(argv)
    assert spy.answered is False  # nothing recorded yet: unsure
    assert (cache / FACTS_DIR).is_dir() and any((cache / RECORDS).iterdir())
    assert _cli(argv) == first and spy.answered is True


def test_json_under_a_previous_activation_is_the_same(
    applied: tuple[Project, Path], spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = applied
    argv = ["activate", project.name, "--shell", "json"]
    _cli(argv)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("_KVENV_NAMES", "PYTHONPATH")
    monkeypatch.setenv("_KVENV_OLD_PYTHONPATH", "/before")
    (code, out, _), answered = _both(spy, argv)
    assert answered is True and code == 0
    assert json.loads(out)["environment_variables"]["PYTHONPATH"].endswith(os.pathsep + "/before")


def _manifest(root: Path) -> Path:
    path = current_manifest_path(root)
    assert path is not None
    return path


def _repoint(root: Path) -> None:
    """Make the pointer vouch for the manifest's bytes as they are now (as only kvenv, or
    someone who can write the whole root, could)."""
    import hashlib

    pointer = json.loads((root / "current.json").read_text())
    manifest = root / "generations" / pointer["generation"] / "manifest.json"
    pointer["manifest_sha256"] = hashlib.sha256(manifest.read_bytes()).hexdigest()
    (root / "current.json").write_text(json.dumps(pointer))


def _edit_manifest(root: Path, change: Any) -> None:
    path = _manifest(root)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _foreign_marker(root: Path) -> None:
    marker = root / ".kvenv-root"
    data = json.loads(marker.read_text())
    data["owner"] = {"name": "someone-else", "file": None}
    marker.write_text(json.dumps(data))


def _shadow(root: Path) -> None:
    data = json.loads(_manifest(root).read_text())
    (Path(data["dirs"]["overlay"]) / "torch").mkdir()


def _drop_overlay(root: Path) -> None:
    import shutil

    data = json.loads(_manifest(root).read_text())
    shutil.rmtree(data["dirs"]["overlay"])


def _preload(data: dict[str, Any]) -> None:
    data["activation"]["env"]["LD_PRELOAD"] = "/tmp/evil.so"


def _unknown_key(data: dict[str, Any]) -> None:
    data["surprise"] = 1


def _newer_format(data: dict[str, Any]) -> None:
    data["schema"], data["kvenv_version"] = 2, "9.0.0"


def _outside_root(data: dict[str, Any]) -> None:
    data["activation"]["pythonpath"].insert(0, "/tmp/elsewhere")


def _bad_sha(data: dict[str, Any]) -> None:
    data["distributions"][0]["wheel_sha256"] = "not-a-sha"


def _profile_invalid(project: Project) -> None:
    with project.profile_path.open("a") as stream:
        stream.write("\n[runtime]\ngpu_memory_utilization = 7\n")


def _profile_comment(project: Project) -> None:
    with project.profile_path.open("a") as stream:
        stream.write("# edited\n")


CHANGES: dict[str, tuple[Any, int, str]] = {
    # what changes -> (how, the full path's exit code, a text its answer holds)
    "manifest edited": (lambda p, r: _edit_manifest(r, _preload), 2, "cannot be trusted"),
    "manifest edited, pointer rewritten": (
        lambda p, r: (_edit_manifest(r, _preload), _repoint(r)),
        0,
        "LD_PRELOAD",
    ),
    # a key this kvenv does not know is ignored (a newer kvenv added it: docs/compatibility.md)
    "manifest with an unknown key, pointer rewritten": (
        lambda p, r: (_edit_manifest(r, _unknown_key), _repoint(r)),
        0,
        "PYTHONPATH",
    ),
    "manifest of a newer format, pointer rewritten": (
        lambda p, r: (_edit_manifest(r, _newer_format), _repoint(r)),
        2,
        "written by kvenv 9.0.0 (format 2); this kvenv reads up to 1: upgrade kvenv",
    ),
    "manifest with a path outside the root, pointer rewritten": (
        lambda p, r: (_edit_manifest(r, _outside_root), _repoint(r)),
        2,
        "outside the runtime root",
    ),
    "manifest with a bad wheel sha256, pointer rewritten": (
        lambda p, r: (_edit_manifest(r, _bad_sha), _repoint(r)),
        2,
        "wheel_sha256",
    ),
    "pointer damaged": (lambda p, r: (r / "current.json").write_text("{not json"), 2, "current"),
    "pointer without a digest": (
        lambda p, r: (r / "current.json").write_text(
            json.dumps({**json.loads((r / "current.json").read_text()), "manifest_sha256": None})
        ),
        2,
        "records no manifest digest",
    ),
    "pointer removed": (lambda p, r: (r / "current.json").unlink(), 2, "nothing is applied"),
    "root owned by another profile": (lambda p, r: _foreign_marker(r), 3, "someone-else"),
    "overlay removed": (lambda p, r: _drop_overlay(r), 2, "unavailable"),
    "a protected package in the overlay": (lambda p, r: _shadow(r), 2, "shadow"),
    "profile made invalid": (lambda p, r: _profile_invalid(p), 2, "gpu_memory_utilization"),
    "profile edited, still valid": (lambda p, r: _profile_comment(p), 0, "PYTHONPATH"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_the_full_path_notices_is_noticed(
    applied: tuple[Project, Path], spy: Spy, change: str
) -> None:
    project, root = applied
    argv = ["activate", project.name, "--shell", "bash"]
    assert _cli(argv)[0] == 0 and _cli(argv)[0] == 0 and spy.answered is True
    how, expected, text = CHANGES[change]
    how(project, root)
    (code, out, err), answered = _both(spy, argv)
    assert answered is False, "the start-up path answered after a change"
    assert code == expected, err
    assert text in out + err
    if expected == 0:  # accepted by the full path, which records: the next is quick again
        assert _cli(argv) == (code, out, err) and spy.answered is True


def test_kvenv_root_changed_is_noticed(
    applied: tuple[Project, Path], spy: Spy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project, _ = applied
    argv = ["activate", project.name, "--shell", "sh"]
    _cli(argv)
    monkeypatch.setenv("KVENV_ROOT", str(tmp_path / "other-root"))
    (code, _, err), answered = _both(spy, argv)
    assert answered is False and code == 2 and "nothing is applied" in err


@pytest.mark.parametrize("profile_valid", [True, False])
def test_an_empty_cache_flag_is_refused_as_the_command_line_is_parsed(
    applied: tuple[Project, Path], spy: Spy, profile_valid: bool
) -> None:
    project, _ = applied
    _cli(["activate", project.name, "--shell", "bash"])
    if not profile_valid:  # refused before any profile is read, valid or not
        _profile_invalid(project)
    (code, _, err), answered = _both(
        spy, ["activate", project.name, "--cache", "", "--shell", "sh"]
    )
    assert answered is False and code == 2
    assert "argument --cache: an empty path is refused" in err


def test_verbose_and_manifest_take_the_full_path(applied: tuple[Project, Path], spy: Spy) -> None:
    project, root = applied
    _cli(["activate", project.name, "--shell", "bash"])
    spy.answered = None
    code, _, err = _cli(["activate", project.name, "--shell", "bash", "-v"])
    assert code == 0 and "kvenv: runtime root:" in err and spy.answered is None
    code, out, _ = _cli(["activate", "--manifest", str(_manifest(root)), "--shell", "bash"])
    assert code == 0 and "PYTHONPATH" in out and spy.answered is None


def test_a_refused_run_records_nothing(
    applied: tuple[Project, Path], spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = applied
    cache = Path(os.environ["KVENV_CACHE_DIR"])
    code, _, err = _cli(["run", project.name, "--", "no-such-command-here"])
    assert code == 2 and "command not found" in err
    assert not (cache / RECORDS).exists() and not (cache / FACTS_DIR).exists()
    code, _, _ = _cli(["activate", project.name, "--shell", "bash", "--root", "/nonexistent"])
    assert code == 2 and not (cache / RECORDS).exists()


def test_run_gets_the_same_environment(
    applied: tuple[Project, Path], spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = applied
    seen: list[tuple[list[str], dict[str, str]]] = []

    def exec_command(argv: list[str], environ: dict[str, str], on_exec: Any = ()) -> None:
        runenv.resolve_command(argv[0], environ)
        for record in on_exec:  # what the real one runs just before the exec
            record()
        seen.append((list(argv), dict(environ)))

    monkeypatch.setattr(runenv, "exec_command", exec_command)
    argv = ["run", project.name, "--", "python3", "-c", "pass"]
    _cli(argv)  # the full path, which records before the exec
    assert spy.answered is False
    spy.off = True
    _cli(argv)
    spy.off = False
    _cli(argv)
    assert spy.answered is True
    assert len(seen) == 3 and seen[1] == seen[2]
    assert seen[2][1]["KVENV_MANIFEST"] == str(_manifest(applied[1]))


def test_the_start_up_path_imports_no_model(applied: tuple[Project, Path]) -> None:
    """In a fresh interpreter the second activate imports neither attrs nor the manifest."""
    import subprocess

    project, _ = applied
    probe = (
        "import io, sys; from contextlib import redirect_stdout\n"
        "from kvenv.cli import main\n"
        "with redirect_stdout(io.StringIO()): code = main(sys.argv[1:])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('attr', 'attrs', 'cattrs')"
        " or m in ('kvenv.env.manifest', 'kvenv.env.root', 'kvenv.model.loading', 'tomllib'))\n"
        "print(code, heavy)\n"
    )
    argv = [sys.executable, "-c", probe, "activate", project.name, "--shell", "bash"]
    first = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert first.stdout.startswith("0 ['attr'")  # the full path, which records
    second = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert second.stdout == "0 []\n", second.stderr
