"""Progress of unpacking and linking: a real apply reports each wheel's bytes as they are
written (``unpack <wheel>``, ending at the wheel's total) and the files linked (``link``), and
the terminal display shows each phase on its own line, only when enabled."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path

import pytest

from kvenv._util.progress import Progress
from kvenv.cli._io import TerminalProgress
from kvenv.env.store import unpack
from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project, locations
from tests.support.wheels import build_wheel


def _recorder() -> tuple[list[tuple[str, int, int | None]], Progress]:
    reports: list[tuple[str, int, int | None]] = []
    lock = threading.Lock()

    def record(label: str, done: int, total: int | None) -> None:
        with lock:
            reports.append((label, done, total))

    return reports, record


def test_apply_reports_unpack_bytes_and_link_files(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    reports, record = _recorder()
    result = apply(
        project.loaded(),
        project.lock(),
        host_snapshot(fake_host_site(tmp_path)),
        locations(tmp_path),
        progress=record,
    )
    assert result.status == "applied"
    for wheel in (project.native, *project.overlay):
        mine = [r for r in reports if r[0] == f"unpack {wheel.name}"]
        with zipfile.ZipFile(wheel) as zf:
            expected = sum(i.file_size for i in zf.infolist() if not i.filename.endswith("/"))
        assert mine[0][1] == 0 and mine[-1][1] == mine[-1][2]
        # every byte of the wheel's files but its RECORD (rewritten by the installer)
        last = mine[-1][2]
        assert last is not None and 0 < last <= expected
        assert [d for _, d, _ in mine] == sorted(d for _, d, _ in mine)
    links = [r for r in reports if r[0] == "link"]
    assert links and links[-1][1] == links[-1][2] and links[-1][1] > 0


def test_big_wheel_unpacked_by_threads_reports_every_byte(tmp_path: Path) -> None:
    files = {f"big/m{i}.py": "x = 1\n" * (200 + i) for i in range(300)}
    files["big/blob.bin"] = "0" * (3 << 20)  # past the size that splits the work in threads
    wheel = build_wheel(tmp_path / "w", "big", "1.0", files=files)
    reports, record = _recorder()
    import hashlib

    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    unpack(tmp_path / "store", sha, wheel, jobs=4, progress=record)
    label = f"unpack {wheel.name}"
    assert {r[0] for r in reports} == {label}
    total = reports[0][2]
    assert total is not None and total > 3 << 20
    assert max(d for _, d, _ in reports) == total
    assert len(reports) > 300  # per file, not once at the end


def test_terminal_display_phases(capsys: pytest.CaptureFixture[str]) -> None:
    display = TerminalProgress("fetching", enabled=True)
    display("a.whl", 5_000_000, 10_000_000)
    assert "fetching 0/1 file(s): 5.0/10.0 MB" in capsys.readouterr().err
    display._last = 0.0
    display("unpack a.whl", 2_000_000, 2_000_000)
    assert "unpacking 1/1 wheel(s): 2.0/2.0 MB" in capsys.readouterr().err
    display._last = 0.0
    display("link", 120, 20_000)
    assert "linking 120/20000 file(s)" in capsys.readouterr().err
    display.close()
    assert capsys.readouterr().err.strip() == ""
    quiet = TerminalProgress("fetching", enabled=False)
    quiet("unpack a.whl", 1, 2)
    quiet.close()
    assert capsys.readouterr().err == ""
