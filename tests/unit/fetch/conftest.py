"""Fixtures of the fetch tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["wire", "httpx"])
def download_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a download test on both clients: :mod:`kvenv.fetch.wire` (no proxy set) and httpx2
    (what a configured proxy selects), whatever the machine's environment says."""
    client: str = request.param
    monkeypatch.setattr("kvenv.fetch.http.proxy_configured", lambda: client == "httpx")
    return client
