"""Every lock test sees only the index and the cache it sets up: no index setting from the
environment (pip's, uv's), and ``$KVENV_CACHE_DIR`` in the test's own temporary directory
(``<tmp_path>/cache``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lockenv import isolate_index_env


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_index_env(monkeypatch, tmp_path / "cache")
