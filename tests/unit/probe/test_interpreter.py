"""The host interpreter: one resolution order, the same for every command."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvenv.errors import InputError
from kvenv.probe.interpreter import resolve_host_python

OWN = "/opt/kvenv/bin/python"
EXISTING = {
    "/flag/python",
    "/env/python",
    "/proj/venv/bin/python",
    "/venv/bin/python",
    "/conda/bin/python",
    "/usr/bin/python3",
    OWN,
}


def _which(name: str) -> str | None:
    return {"python3": "/usr/bin/python3", "python3.12": "/usr/bin/python3"}.get(name)


def _resolve(
    flag: str | None = None,
    environ: dict[str, str] | None = None,
    profile: str | None = None,
    which: Callable[[str], str | None] = _which,
) -> tuple[str, str]:
    host = resolve_host_python(
        flag=flag,
        environ=environ or {},
        profile_value=profile,
        profile_file="/proj/profiles/p.toml",
        which=which,
        runnable=lambda p: p in EXISTING,
        own=OWN,
    )
    return host.path, host.source


FULL = {
    "KVENV_PYTHON": "/env/python",
    "VIRTUAL_ENV": "/venv",
    "CONDA_PREFIX": "/conda",
}


def test_the_order_flag_env_profile_venv_conda_path() -> None:
    assert _resolve("/flag/python", FULL, "/proj/venv/bin/python") == (
        "/flag/python",
        "--python",
    )
    assert _resolve(None, FULL, "/proj/venv/bin/python") == ("/env/python", "$KVENV_PYTHON")
    rest = {k: v for k, v in FULL.items() if k != "KVENV_PYTHON"}
    path, source = _resolve(None, rest, "/proj/venv/bin/python")
    assert path == "/proj/venv/bin/python"
    assert source.startswith("the profile's [host] python") and "p.toml" in source
    assert _resolve(None, rest) == ("/venv/bin/python", "the active environment $VIRTUAL_ENV")
    assert _resolve(None, {"CONDA_PREFIX": "/conda"}) == (
        "/conda/bin/python",
        "the active environment $CONDA_PREFIX",
    )
    assert _resolve() == ("/usr/bin/python3", "python3 on PATH")


def test_a_bare_name_is_looked_up_on_path() -> None:
    assert _resolve("python3.12") == ("/usr/bin/python3", "--python")


def test_kvenv_own_interpreter_only_when_nothing_else_and_it_says_so() -> None:
    host = resolve_host_python(
        flag=None, environ={}, which=lambda _n: None, runnable=lambda p: p == OWN, own=OWN
    )
    assert host.path == OWN and host.own
    assert host.note is not None and "kvenv's own" in host.note


def test_an_environment_without_a_python_is_skipped() -> None:
    assert _resolve(None, {"VIRTUAL_ENV": "/gone"}) == ("/usr/bin/python3", "python3 on PATH")


@pytest.mark.parametrize(
    ("flag", "environ", "profile", "named"),
    [
        ("/nope/python", {}, None, "--python"),
        (None, {"KVENV_PYTHON": "/nope/python"}, None, "$KVENV_PYTHON"),
        (None, {"KVENV_PYTHON": ""}, None, "$KVENV_PYTHON"),
        (None, {}, "/nope/python", "[host] python (/proj/profiles/p.toml)"),
    ],
)
def test_a_named_interpreter_that_does_not_exist_is_an_error_naming_its_origin(
    flag: str | None, environ: dict[str, str], profile: str | None, named: str
) -> None:
    with pytest.raises(InputError) as caught:
        _resolve(flag, environ, profile)
    assert named in str(caught.value)
    assert caught.value.hint


def test_own_is_recognised_when_chosen() -> None:
    host = resolve_host_python(
        flag=OWN, environ={}, which=_which, runnable=lambda p: p in EXISTING, own=OWN
    )
    assert host.own and host.note is None
