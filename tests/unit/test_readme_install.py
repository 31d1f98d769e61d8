"""The README's "Installing kvenv" section (issue 26): it says plainly that ``kvenv-overlay``
is not on the package index yet, and the ways it gives instead name this project as it is
built (the distribution's name and the wheel file ``python -m build`` writes)."""

from __future__ import annotations

import re

from kvenv._util import tomlio
from tests.support.paths import REPO


def _section() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split("## Installing kvenv", 1)[1].split("\n## ", 1)[0]


def test_the_readme_says_kvenv_overlay_is_not_on_the_index_yet() -> None:
    text = " ".join(_section().split())
    assert "`kvenv-overlay` is not on the package index yet" in text
    assert "`pip install kvenv` installs the wrong thing" in text


def test_the_install_commands_name_this_project() -> None:
    project = tomlio.read(REPO / "pyproject.toml")["project"]
    section = _section()
    assert "pip install .  " in section
    assert "version" in project["dynamic"]  # from git (hatch-vcs): the wheel's name varies
    assert f"dist/{project['name'].replace('-', '_')}-*.whl" in section
    assert re.search(rf'"{re.escape(project["name"])} @ git\+https://', section)
