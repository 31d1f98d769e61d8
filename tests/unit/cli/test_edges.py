"""The command line at its edges: standard JSON only, one line of a description, a closed pipe,
and ``verify-wheel`` of files that are not wheels or whose RECORD lies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvenv.cli import main
from kvenv.errors import KvenvError
from tests.support.paths import REPO
from tests.support.wheels import build_wheel, sha256_of


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KVENV_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KVENV_PROFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").mkdir()
    return tmp_path


# standard JSON only ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_emit_json_never_writes_non_standard_json(
    value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvenv.cli._io import emit_json

    with pytest.raises(KvenvError, match="not a finite number"):
        emit_json({"ok": True, "nested": [{"x": value}]})
    assert capsys.readouterr().out == ""


def test_show_json_of_a_nan_profile_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "profiles" / "nan.toml"
    path.write_text('schema = 1\nname = "nan"\n[runtime]\ngpu_memory_utilization = nan\n')
    code, out, err = run(capsys, "show", "nan", "--json")
    assert code == 2 and "NaN" not in out and err == ""
    error = json.loads(out)  # with --json, the error itself is the JSON on stdout
    assert error["error"] == "ProfileError"
    assert [(p["file"], p["path"]) for p in error["problems"]] == [
        (str(path), "$.runtime.gpu_memory_utilization")
    ]
    code, out, err = run(capsys, "show", "nan")
    assert code == 2 and out == ""
    assert str(path) in err and "$.runtime.gpu_memory_utilization" in err


# one line of a description ---------------------------------------------------------------------


def test_profiles_shows_one_line_of_a_description(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "profiles" / "multi.toml").write_text(
        'schema = 1\nname = "multi"\ndescription = """first line\nsecond line\nthird"""\n'
    )
    (project / "profiles" / "wide.toml").write_text(
        f'schema = 1\nname = "wide"\ndescription = "{"w" * 4000}"\n'
    )
    code, out, _ = run(capsys, "profiles")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "first line" in lines["multi"] and "second line" not in out
    assert len(lines["wide"]) <= 200 and lines["wide"].endswith("…")
    code, out, _ = run(capsys, "profiles", "--json")
    rows = {r["name"]: r for r in json.loads(out)["profiles"]}
    assert rows["multi"]["description"] == "first line\nsecond line\nthird"


def test_profiles_names_an_oversized_profile_briefly(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "profiles" / "huge.toml").write_text(
        f'schema = 1\nname = "huge"\ndescription = "{"x" * 5_000_000}"\n'
    )
    code, out, _ = run(capsys, "profiles")
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("huge")]
    assert "invalid" in line and len(line) < 400


# a closed pipe -----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["schema", "profile"], ["--version"], ["profiles"]])
def test_closed_stdout_exits_quietly(argv: list[str], tmp_path: Path) -> None:
    """``kvenv … | head -1``: the reader is gone before kvenv writes. No message, exit 141."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kvenv", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.stderr.decode() == ""
    assert result.returncode == 141


def test_head_one_of_a_long_output_is_quiet(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = f"set -o pipefail; {sys.executable} -m kvenv schema profile | head -1"
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, cwd=tmp_path, env=env, timeout=60, check=False
    )
    assert result.stdout.decode().count("\n") == 1
    assert result.stderr.decode() == ""
    assert result.returncode in (0, 141)


def test_a_short_output_read_whole_ends_with_the_commands_own_code(tmp_path: Path) -> None:
    """What the exit-code tables say of 141: a reader that leaves only after kvenv's short
    output reached the pipe (``kvenv verify | head -1`` most of the time) cannot be told from
    one that read it all: the command's own code. (A reader gone first: 141, above.)"""
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kvenv", "--version"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            first = reader.readline()  # read after kvenv wrote, then closed: like head -1
    assert first.startswith(b"kvenv ") and result.returncode == 0
    for page in (REPO / "README.md", REPO / "docs" / "errors.md"):
        row = next(line for line in page.read_text().splitlines() if line.startswith("| 141 |"))
        assert "ends with its own code" in row and "usually" in row, page


# verify-wheel ------------------------------------------------------------------------------------


def _rewrite(wheel: Path, change: dict[str, bytes | None]) -> None:
    """Rewrite ``wheel`` with some members replaced (bytes) or dropped (None)."""
    with zipfile.ZipFile(wheel) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    for name, data in change.items():
        if data is None:
            members.pop(name, None)
        else:
            members[name] = data
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path / "wheels", "demo-pkg", "1.2.3")


def test_verify_wheel_of_a_file_that_is_not_a_zip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "demo_pkg-1.2.3-py3-none-any.whl"
    fake.write_text("this is not a zip archive\n")
    code, out, err = run(capsys, "verify-wheel", str(fake))
    assert (code, out) == (2, "")
    assert str(fake) in err and "not a wheel" in err and "zip" in err


def test_verify_wheel_without_record(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rewrite(wheel, {"demo_pkg-1.2.3.dist-info/RECORD": None})
    code, out, err = run(capsys, "verify-wheel", str(wheel))
    assert (code, out) == (1, "")
    assert str(wheel) in err and "RECORD" in err and "missing" in err


def test_verify_wheel_without_metadata(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = "demo_pkg-1.2.3.dist-info/RECORD"
    with zipfile.ZipFile(wheel) as zf:
        rows = zf.read(record).decode().splitlines()
    kept = "\n".join(r for r in rows if "/METADATA," not in r) + "\n"
    _rewrite(wheel, {"demo_pkg-1.2.3.dist-info/METADATA": None, record: kept.encode()})
    code, out, err = run(capsys, "verify-wheel", str(wheel))
    assert (code, out) == (1, "")
    assert "METADATA" in err and "missing" in err


def test_verify_wheel_whose_record_lies_names_each_file(
    wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rewrite(
        wheel,
        {
            "demo_pkg/__init__.py": b"__version__ = 'tampered'\n",
            "demo_pkg-1.2.3.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\n",
        },
    )
    code, out, err = run(capsys, "verify-wheel", str(wheel))
    assert (code, out) == (1, "")
    assert "demo_pkg/__init__.py" in err and "demo_pkg-1.2.3.dist-info/METADATA" in err
    code, out, _ = run(capsys, "verify-wheel", str(wheel), "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is False and data["sha256"] == sha256_of(wheel)
    assert len(data["problems"]) == 2


def test_verify_wheel_of_a_good_wheel_reports_ok(
    wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "verify-wheel", str(wheel), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["problems"] == []
