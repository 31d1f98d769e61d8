"""Where the tests find the repository, their fixtures and the fake vLLM package."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
FAKE_VLLM = TESTS / "fake_vllm"
