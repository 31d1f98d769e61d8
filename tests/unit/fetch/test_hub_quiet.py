"""huggingface_hub's own retry lines ("Retrying in 1s [Retry 1/5]") never reach the terminal
while kvenv downloads; kvenv reports the failure itself, once (issue 12, item 5)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import huggingface_hub.utils._http
import pytest

from kvenv.errors import FetchError
from kvenv.fetch import fetch_all
from tests.support.hubserver import HubServer, hub_server
from tests.support.paths import REPO
from tests.unit.fetch.test_hub import _native

__all__ = ["hub_server"]

# A fresh interpreter, as `kvenv bundle` / `kvenv apply` run: huggingface_hub is imported for
# the first time during the download (its logging module then resets its own level).
_SCRIPT = textwrap.dedent(
    """
    import sys, time
    time.sleep = lambda _seconds: None  # the client's backoff, without the wait
    from pathlib import Path
    from kvenv.fetch import fetch_all
    from kvenv.model.fields import HfRepo, Revision, WheelFilename
    from kvenv.model.profile import HfSource
    from kvenv.plan.artifacts import Artifact
    from kvenv.errors import FetchError

    source = HfSource(
        repo=HfRepo("kvenv-test/binaries"),
        revision=Revision("0" * 40),
        filename=WheelFilename("a-1-py3-none-any.whl"),
    )
    artifact = Artifact("a", "1", "a-1-py3-none-any.whl", "1" * 64, None, "native", source)
    try:
        fetch_all([artifact], cache=Path(sys.argv[1]))
    except FetchError as exc:
        print("kvenv:", exc.message, file=sys.stderr)
        sys.exit(4)
    """
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there now: connections are refused


def test_a_refused_connection_prints_no_retry_lines_in_a_fresh_process(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING")) and k != "TRANSFORMERS_OFFLINE"
    }
    env["HF_HOME"] = str(tmp_path / "hf-home")
    env["HF_ENDPOINT"] = f"https://127.0.0.1:{_closed_port()}"
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert "Retrying in" not in done.stderr, done.stderr
    assert "thrown while requesting" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Hugging Face Hub download failed" in lines[0], done.stderr


def test_retry_lines_are_silenced_even_where_a_child_logger_has_its_own_level(
    hub_server: HubServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # An application's logging configuration can give the client's modules their own level;
    # kvenv's quiet window must still hold, and the level comes back afterwards.
    monkeypatch.setattr(huggingface_hub.utils._http.time, "sleep", lambda _: None)
    http_logger = logging.getLogger("huggingface_hub.utils._http")
    seen: list[logging.LogRecord] = []

    class _Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    catch = _Catch(logging.DEBUG)
    before = http_logger.level
    http_logger.setLevel(logging.INFO)
    http_logger.addHandler(catch)
    try:
        artifact, _ = _native(tmp_path, hub_server)
        hub_server.__exit__(None, None, None)  # the connection drops: nothing listens any more
        with pytest.raises(FetchError, match="Hugging Face Hub download failed"):
            fetch_all([artifact], cache=tmp_path / "cache")
        assert http_logger.level == logging.INFO  # restored
    finally:
        http_logger.removeHandler(catch)
        http_logger.setLevel(before)
    assert [r.getMessage() for r in seen if r.levelno >= logging.WARNING] == []
