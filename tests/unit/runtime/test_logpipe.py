"""The supervisor's redacting writer masks every secret, also one split across chunks."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvenv.runtime import logpipe
from kvenv.runtime.logpipe import REDACT_ENV, Redactor

SECRET = b"sk-abc-123-secret"


@settings(max_examples=200)
@given(
    before=st.binary(max_size=40),
    after=st.binary(max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
    copies=st.integers(min_value=1, max_value=3),
)
def test_secrets_are_masked_across_any_chunking(
    before: bytes, after: bytes, cuts: list[int], copies: int
) -> None:
    data = before + (SECRET + after) * copies
    sink = io.BytesIO()
    redactor = Redactor([sink], [SECRET, b"other-key"])
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(points):
        redactor.write(data[start:end])
    redactor.close()
    assert SECRET not in sink.getvalue()
    assert sink.getvalue() == data.replace(SECRET, b"***")


def test_output_is_not_held_back_without_a_partial_secret() -> None:
    sink = io.BytesIO()
    redactor = Redactor([sink], [SECRET])
    redactor.write(b"loading weights\n")
    assert sink.getvalue() == b"loading weights\n"
    redactor.write(b"key=sk-abc")
    assert sink.getvalue() == b"loading weights\nkey="
    redactor.write(b"-123-secret!")
    assert sink.getvalue() == b"loading weights\nkey=***!"


def test_the_script_masks_the_log_under_python_isolated(tmp_path: Path) -> None:
    """Run as ``kvenv serve`` runs it (``python -I``, another working directory, no
    PYTHONPATH): it finds the shared redactor next to itself and masks the child's output."""
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"MY_KEY": SECRET.decode(), REDACT_ENV: "MY_KEY"})
    child = [sys.executable, "-c", "import os; print('key:', os.environ['MY_KEY'])"]
    done = subprocess.run(
        [sys.executable, "-I", logpipe.__file__, str(log), "--echo", "--", *child],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert log.read_bytes() == done.stdout == b"key: ***\n"
