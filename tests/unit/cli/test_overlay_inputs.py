"""The profile declares the overlay's inputs (issue 36): ``[overlay] requires`` and
``constraints``, ``kvenv add``/``remove`` (tomlkit, comments kept, restored on failure),
one-off ``--require``/``-c`` that add up, ``--fresh`` keeping what is declared, upgrades
(``--upgrade``, ``--upgrade-package``) and ``--prefer`` checked, and every lock run saying
what changed (text, ``--json``, ``--format markdown``, ``--dry-run``), as ``kvenv diff``
does for two files. Hermetic: a wheelhouse of small real wheels, ``--no-index``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support.clienv import isolated_cli_dir
from tests.support.hardening import CliResult, run_cli
from tests.support.wheels import build_wheel

PROFILE = """\
# the team's profile: keep this comment
schema = 1
name = "team"   # a trailing comment

[target]
python = "3.10"
implementation = "cpython"
abi = "none"

[native]
name = "markdown-it-py"
version = "3.0.0"
sha256 = "{sha}"
size = {size}

[native.source]
kind = "path"
path = "wheels/{file}"

[overlay]
lock = "locks/pylock.team.toml"
{overlay}"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolated_cli_dir(tmp_path, monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wheels = tmp_path / "wheels"
    build_wheel(wheels, "markdown-it-py", "3.0.0", requires=["mdurl~=0.1"])
    build_wheel(wheels, "mdurl", "0.1.2")
    for version in ("13.7.1", "13.9.4"):
        build_wheel(wheels, "rich", version, requires=["pygments>=2"])
    build_wheel(wheels, "pygments", "2.18.0")
    for version in ("4.66.0", "4.67.1"):
        build_wheel(wheels, "tqdm", version)
    build_wheel(wheels, "six", "1.17.0")
    write_profile(tmp_path, "")
    return tmp_path


def write_profile(project: Path, overlay: str) -> Path:
    native = next((project / "wheels").glob("markdown_it_py-*.whl"))
    path = project / "profiles" / "team.toml"
    path.write_text(
        PROFILE.format(
            sha=hashlib.sha256(native.read_bytes()).hexdigest(),
            size=native.stat().st_size,
            file=native.name,
            overlay=overlay,
        )
    )
    return path


FLAGS = ["--no-index", "--find-links", "wheels"]


def kvenv(*argv: str) -> CliResult:
    return run_cli(list(argv))


def locked(project: Path) -> dict[str, str]:
    import tomllib

    doc = tomllib.loads((project / "locks" / "pylock.team.toml").read_text())
    return {
        p["name"]: p["version"]
        for p in doc["packages"]
        if not p.get("tool", {}).get("kvenv", {}).get("native")
    }


def test_declared_requires_are_locked_checked_and_survive_fresh(project: Path) -> None:
    write_profile(project, 'requires = ["rich<13.8"]\nconstraints = ["pygments<3"]\n')
    first = kvenv("lock", "team", *FLAGS)
    assert first.code == 0, first.text
    assert "Added rich v13.7.1" in first.out and "Added pygments v2.18.0" in first.out
    assert locked(project) == {"mdurl": "0.1.2", "pygments": "2.18.0", "rich": "13.7.1"}
    assert kvenv("lock", "team", "--check").code == 0
    # the profile changes, the lock does not: the check fails
    write_profile(project, 'requires = ["rich<13.8", "six"]\n')
    stale = kvenv("lock", "team", "--check")
    assert stale.code == 1 and "profile changed" in stale.text, stale.text
    fresh = kvenv("lock", "team", "--fresh", *FLAGS)
    assert fresh.code == 0, fresh.text
    assert "Added six v1.17.0" in fresh.out
    assert set(locked(project)) == {"mdurl", "pygments", "rich", "six"}  # nothing dropped
    assert kvenv("lock", "team", "--check").code == 0


def test_a_protected_requirement_is_refused_with_its_path(project: Path) -> None:
    write_profile(project, 'requires = ["rich", "torch>=2"]\n')
    result = kvenv("lock", "team", *FLAGS)
    assert result.code == 2, result.text
    assert "$.overlay.requires[1]" in result.err and "protected" in result.err
    assert "profiles/team.toml" in result.err and "kvenv remove torch" in result.err
    assert "Traceback" not in result.text


def test_one_off_requires_add_up_and_are_said(project: Path) -> None:
    (project / "a.txt").write_text("six\n")
    (project / "b.txt").write_text("tqdm<4.67\n")
    assert kvenv("lock", "team", "--require", "a.txt", *FLAGS).code == 0
    second = kvenv("lock", "team", "--require", "b.txt", *FLAGS)
    assert second.code == 0, second.text
    assert set(locked(project)) == {"mdurl", "six", "tqdm"}  # the first was not replaced
    assert "Added tqdm v4.66.0" in second.out
    assert "kept from the lock: --require six" in second.err
    dropped = kvenv("lock", "team", "--fresh", *FLAGS)
    assert "Removed six v1.17.0" in dropped.out and "Removed tqdm v4.66.0" in dropped.out


def test_add_and_remove_edit_in_place_and_relock(project: Path) -> None:
    profile = project / "profiles" / "team.toml"
    assert kvenv("lock", "team", *FLAGS).code == 0
    added = kvenv("add", "rich<13.8", "tqdm==4.66.0", "--profile", "team", *FLAGS)
    assert added.code == 0, added.text
    assert "Added rich v13.7.1" in added.out and "Added tqdm v4.66.0" in added.out
    text = profile.read_text()
    assert text.startswith("# the team's profile: keep this comment\n")
    assert 'name = "team"   # a trailing comment\n' in text
    assert 'requires = [\n    "rich<13.8",\n    "tqdm==4.66.0",\n]' in text
    assert kvenv("lock", "team", "--check").code == 0
    replaced = kvenv("add", "tqdm>=4.67", "-p", "team", *FLAGS)
    assert "replaced 'tqdm==4.66.0' with 'tqdm>=4.67'" in replaced.out, replaced.text
    assert "Updated tqdm v4.66.0 -> v4.67.1" in replaced.out
    removed = kvenv("remove", "TQDM", "-p", "team", *FLAGS)
    assert removed.code == 0, removed.text
    assert "Removed tqdm v4.67.1" in removed.out
    assert 'requires = [\n    "rich<13.8",\n]' in profile.read_text()
    before = profile.read_bytes()
    missing = kvenv("remove", "numpy", "-p", "team", *FLAGS)
    assert missing.code == 2 and "declared: 'rich<13.8'" in missing.err, missing.text
    assert profile.read_bytes() == before
    assert kvenv("add", "six", "-p", "team", "--no-lock").code == 0
    assert kvenv("lock", "team", "--check").code == 1  # edited, not relocked


def test_a_failed_relock_restores_the_profile_byte_for_byte(project: Path) -> None:
    profile = project / "profiles" / "team.toml"
    assert kvenv("lock", "team", *FLAGS).code == 0
    before, lock_before = (
        profile.read_bytes(),
        (project / "locks" / "pylock.team.toml").read_bytes(),
    )
    nothing = kvenv("add", "no-such-package", "-p", "team", *FLAGS)
    assert nothing.code == 3, nothing.text
    protected = kvenv("add", "torch", "-p", "team", *FLAGS)
    assert protected.code == 2 and "$.overlay.requires[0]" in protected.err, protected.text
    assert profile.read_bytes() == before
    assert (project / "locks" / "pylock.team.toml").read_bytes() == lock_before


def test_a_builtin_profile_is_never_edited(project: Path) -> None:
    result = kvenv("add", "rich", "--profile", "demo", "--no-lock")
    assert result.code == 2, result.text
    assert "kvenv init NAME --extends demo" in result.err


def test_extends_merges_declared_requirements(project: Path) -> None:
    write_profile(project, 'requires = ["rich<13.8", "six"]\n')
    (project / "profiles" / "child.toml").write_text(
        'schema = 1\nname = "child"\nextends = "team"\n[overlay]\nrequires = ["rich>=13.9"]\n'
    )
    from kvenv.model.loading import load_profile

    loaded = load_profile("child")
    assert loaded.profile.overlay.requires == ["rich>=13.9", "six"]
    (project / "profiles" / "child.toml").write_text(
        'schema = 1\nname = "child"\nextends = "team"\n[overlay]\nrequires = ["tqdm", "torch"]\n'
    )
    bad = kvenv("validate", "child")  # the merged list's entry 3, named where it is written
    assert bad.code == 1, bad.text
    assert "child.toml" in bad.out and "$.overlay.requires[1]" in bad.out, bad.out
    assert "$.overlay.requires[3]" not in bad.out


def test_upgrades_move_only_what_is_asked(project: Path) -> None:
    write_profile(project, 'requires = ["rich", "tqdm"]\n')
    (project / "old.txt").write_text("rich==13.7.1\ntqdm==4.66.0\n")
    first = kvenv("lock", "team", "--prefer", "old.txt", *FLAGS)
    assert first.code == 0, first.text
    assert locked(project)["rich"] == "13.7.1" and locked(project)["tqdm"] == "4.66.0"
    assert "unchanged" in kvenv("lock", "team", *FLAGS).out  # pins kept
    one = kvenv("lock", "team", "--upgrade-package", "tqdm", *FLAGS)
    assert one.code == 0, one.text
    assert "Updated tqdm v4.66.0 -> v4.67.1" in one.out and "rich" not in one.out
    back = kvenv("lock", "team", "-P", "tqdm==4.66.0", *FLAGS)
    assert "Updated tqdm v4.67.1 -> v4.66.0" in back.out, back.text
    dry = kvenv("lock", "team", "--upgrade", "--dry-run", "--json", *FLAGS)
    assert dry.code == 0, dry.text
    data = json.loads(dry.out)
    assert data["dry-run"] and data["changed"]
    assert {u["name"]: (u["old"], u["new"]) for u in data["changes"]["updated"]} == {
        "rich": ("13.7.1", "13.9.4"),
        "tqdm": ("4.66.0", "4.67.1"),
    }
    assert locked(project)["rich"] == "13.7.1"  # a dry run writes nothing
    table = kvenv("lock", "team", "--upgrade", "--format", "markdown", *FLAGS)
    assert "| updated | rich | 13.7.1 | 13.9.4 |" in table.out, table.text
    assert locked(project) == {
        "mdurl": "0.1.2",
        "pygments": "2.18.0",
        "rich": "13.9.4",
        "tqdm": "4.67.1",
    }


@pytest.mark.parametrize(
    ("lines", "flag", "wanted"),
    [
        ("tqdm==9.9.9\n", "--prefer", "tqdm 9.9.9 does not exist"),
        ("numpy==1.0\n", "--prefer", "numpy 1.0 does not exist"),
        ("six==1.17.0\n", "--prefer", "six==1.17.0 names nothing in the resolution"),
        ("tqdm\n", "--prefer", "does not pin one version"),
        ("tqdm>=4\n", "--prefer", "does not pin one version"),
        ("", "tqdm==9.9.9", "tqdm 9.9.9 does not exist"),
        ("", "sixx", "sixx names nothing in the resolution"),
    ],
)
def test_asking_for_what_is_not_there_is_an_error(
    project: Path, lines: str, flag: str, wanted: str
) -> None:
    write_profile(project, 'requires = ["tqdm"]\n')
    assert kvenv("lock", "team", *FLAGS).code == 0
    before = (project / "locks" / "pylock.team.toml").read_bytes()
    if flag == "--prefer":
        (project / "prefer.txt").write_text(lines)
        result = kvenv("lock", "team", "--prefer", "prefer.txt", *FLAGS)
    else:
        result = kvenv("lock", "team", "--upgrade-package", flag, *FLAGS)
    assert result.code == 2, result.text
    assert wanted in result.err, result.err
    assert "Traceback" not in result.text
    assert (project / "locks" / "pylock.team.toml").read_bytes() == before


def test_diff_reports_two_files_as_lock_does(project: Path) -> None:
    write_profile(project, 'requires = ["tqdm==4.66.0"]\n')
    assert kvenv("lock", "team", *FLAGS).code == 0
    old = project / "old.toml"
    old.write_bytes((project / "locks" / "pylock.team.toml").read_bytes())
    assert kvenv("add", "tqdm>=4.67", "rich<13.8", "-p", "team", *FLAGS).code == 0
    new = project / "locks" / "pylock.team.toml"
    text = kvenv("diff", str(old), str(new))
    assert text.code == 0, text.text
    assert text.out.splitlines() == [
        "Added pygments v2.18.0",
        "Added rich v13.7.1",
        "Updated tqdm v4.66.0 -> v4.67.1",
    ]
    as_json = json.loads(kvenv("diff", str(old), str(new), "--json").out)
    assert as_json["changes"]["updated"] == [{"name": "tqdm", "old": "4.66.0", "new": "4.67.1"}]
    table = kvenv("diff", str(old), str(new), "--format", "markdown").out
    assert "| added | rich | | 13.7.1 |" in table
    assert kvenv("diff", str(new), str(new)).out.strip().startswith("No changes")
    broken = project / "broken.toml"
    broken.write_text("this is [ not toml")
    bad = kvenv("diff", str(broken), str(new))
    assert bad.code == 2 and "broken.toml" in bad.err and "Traceback" not in bad.text
    not_a_lock = kvenv("diff", str(project / "profiles" / "team.toml"), str(new))
    assert not_a_lock.code == 2 and "$.lock-version" in not_a_lock.err, not_a_lock.text
