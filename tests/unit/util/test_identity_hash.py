"""sha256 of small inputs without OpenSSL (kvenv._util.identity): the digests are
``hashlib``'s, with CPython's own module and with the ``hashlib`` fallback, and importing it
does not load ``hashlib``."""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
from types import ModuleType

import pytest

from kvenv._util import identity as smallhash
from kvenv._util.identity import sha256_hex

INPUTS = [b"", b"abc", bytes(range(256)) * 4099]


@pytest.mark.parametrize("data", INPUTS)
def test_the_digest_is_hashlibs(data: bytes) -> None:
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_without_cpythons_module_hashlib_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def refuse(name: str, package: str | None = None) -> ModuleType:
        if name in ("_sha2", "_sha256"):
            raise ImportError(name)
        return real(name, package)

    monkeypatch.setattr(smallhash, "_SHA256", None)
    monkeypatch.setattr(importlib, "import_module", refuse)
    for data in INPUTS:
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert smallhash._SHA256 is hashlib.sha256


def test_openssl_is_not_loaded() -> None:
    code = (
        "import sys; from kvenv._util.identity import sha256_hex; sha256_hex(b'x'); "
        "print(sorted(m for m in ('hashlib', '_hashlib', 'typing') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"
