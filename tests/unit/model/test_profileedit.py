"""A profile edited in place: comments and order kept, an edit that would not load refused
with nothing written, the file put back when what follows fails, a built-in refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvenv.errors import InputError, ProfileError
from kvenv.model.loading import load_profile
from kvenv.model.profileedit import edit_profile, editable_path

TEXT = """# The team's profile: this comment stays.
schema = 1
name = "team"   # trailing comment stays too

[target]
python = "3.12"   # the image's Python
abi = "cp312"

[host]
protected = ["torch"]
"""


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    (tmp_path / "profiles").mkdir()
    path = tmp_path / "profiles" / "team.toml"
    path.write_text(TEXT)
    return path


def test_an_edit_keeps_comments_and_order(profile: Path) -> None:
    def change(document: object) -> None:
        document["description"] = "edited"  # type: ignore[index]

    with edit_profile(profile, change) as edit:
        assert edit.changed and edit.loaded.profile.description == "edited"
    text = profile.read_text()
    assert text.startswith(TEXT.split("\n\n")[0])  # the head, comments included
    assert "# the image's Python" in text and 'description = "edited"' in text
    assert load_profile(str(profile)).profile.description == "edited"


def test_an_edit_that_would_not_load_writes_nothing(profile: Path) -> None:
    def change(document: object) -> None:
        document["target"]["abi"] = "cp311"  # type: ignore[index]  # not Python 3.12's

    with pytest.raises(ProfileError) as caught, edit_profile(profile, change):
        pytest.fail("the body must not run")
    assert "would not load" in caught.value.message
    assert any(p.path == "$.target.abi" and p.file == str(profile) for p in caught.value.problems)
    assert profile.read_text() == TEXT
    assert [p.name for p in profile.parent.iterdir()] == ["team.toml"]  # no scratch left


def test_a_failure_after_the_edit_puts_the_file_back(profile: Path) -> None:
    def change(document: object) -> None:
        document["description"] = "edited"  # type: ignore[index]

    with pytest.raises(RuntimeError), edit_profile(profile, change):
        assert "edited" in profile.read_text()
        raise RuntimeError("the relock failed")
    assert profile.read_text() == TEXT


def test_a_builtin_profile_is_not_editable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("KVENV_PROFILE_PATH", "KVENV_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    loaded = load_profile("demo")
    assert loaded.origin == "builtin"
    with pytest.raises(InputError) as caught:
        editable_path(loaded, "add")
    assert caught.value.hint == "kvenv init NAME --extends demo"
